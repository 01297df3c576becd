"""DiagGym on the platform: patient cases, a world model of exam results and the multi-turn diagnostic environment.

catalogue   diseases (ICD-10, synonyms) and exams (labs, panels, microbiology, imaging); name matching
exam_data / disease_data   the catalogue's content: reference ranges, result templates, disease effects
results     lab results as text (DiagGym's `Value: ...; Numeric Value: ...` lines) and back
record      the Case record, its JSONL I/O and the split by patient
cohort      the synthetic cohort generator;  profile: the patient profile as text
importer    DiagGym-format records into cases
validation  the Great Expectations suite for case files
world       the WorldModel protocol; the statistical and the recorded (oracle) world models
lm_world    the LM world model: DiagGym-serialized SFT rows, TRL training and merge, simulation through a policy
fidelity    a world model against held-out records (lab distances, report diversity, contradictions); the card
actions     order-exams and diagnosis actions parsed from model text
grading     diagnosis matching and the reward;  metrics: exam precision/recall/F1, accuracy, turns
env         the diagnostic environment, recording the platform's Episode
evaluate    diagnostic agents end to end and single turn, with intervals and paired differences; the report
baselines   random-exam and greedy most-informative-exam agents
"""
