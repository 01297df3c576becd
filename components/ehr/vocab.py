"""Real-looking clinical vocabularies the synthetic EHR databases draw from (names as MIMIC-III / eICU spell them)."""

from __future__ import annotations

# (short_title, long_title, icd9_code)
DIAGNOSES: list[tuple[str, str, str]] = [
    ("hypertension nos", "unspecified essential hypertension", "4019"),
    ("atrial fibrillation", "atrial fibrillation", "42731"),
    ("chf nos", "congestive heart failure, unspecified", "4280"),
    ("acute kidney failure nos", "acute kidney failure, unspecified", "5849"),
    ("diabetes uncompl adult", "diabetes mellitus without mention of complication, type ii", "25000"),
    ("hyperlipidemia nec/nos", "other and unspecified hyperlipidemia", "2724"),
    ("crnry athrscl natve vssl", "coronary atherosclerosis of native coronary artery", "41401"),
    ("urin tract infection nos", "urinary tract infection, site not specified", "5990"),
    ("esophageal reflux", "esophageal reflux", "53081"),
    ("acute respiratry failure", "acute respiratory failure", "51881"),
    ("pneumonia, organism nos", "pneumonia, organism unspecified", "486"),
    ("septicemia nos", "unspecified septicemia", "0389"),
    ("severe sepsis", "severe sepsis", "99592"),
    ("anemia nos", "anemia, unspecified", "2859"),
    ("hypothyroidism nos", "unspecified acquired hypothyroidism", "2449"),
    ("hyposmolality", "hyposmolality and/or hyponatremia", "2761"),
    ("acidosis", "acidosis", "2762"),
    ("depressive disorder nec", "depressive disorder, not elsewhere classified", "311"),
    ("chr airway obstruct nec", "chronic airway obstruction, not elsewhere classified", "496"),
    ("protein-cal malnutr nos", "unspecified protein-calorie malnutrition", "2639"),
    ("prim cardiomyopathy nec", "other primary cardiomyopathies", "4254"),
    ("bph w/o urinary obs/luts", "hypertrophy (benign) of prostate without urinary obstruction", "60000"),
    ("accidental op laceration", "accidental puncture or laceration during a procedure", "9982"),
    ("pure hypercholesterolem", "pure hypercholesterolemia", "2720"),
    ("old myocardial infarct", "old myocardial infarction", "412"),
    ("obstructive sleep apnea", "obstructive sleep apnea (adult)(pediatric)", "32723"),
    ("chronic kidney dis nos", "chronic kidney disease, unspecified", "5859"),
    ("hx of tobacco use", "personal history of tobacco use", "V1582"),
    ("long-term use anticoagul", "long-term (current) use of anticoagulants", "V5861"),
    ("thrombocytopenia nos", "thrombocytopenia, unspecified", "2875"),
    ("hypotension nos", "hypotension, unspecified", "4589"),
    ("celiac disease", "celiac disease", "5790"),
    ("pleural effusion nos", "pleural effusion, unspecified", "5119"),
    ("subendo infarct, initial", "subendocardial infarction, initial episode of care", "41071"),
    ("cardiac arrest", "cardiac arrest", "4275"),
    ("hyperpotassemia", "hyperpotassemia", "2767"),
    ("food/vomit pneumonitis", "pneumonitis due to inhalation of food or vomitus", "5070"),
    ("alcohol withdrawal", "alcohol withdrawal", "29181"),
    ("cirrhosis of liver nos", "cirrhosis of liver without mention of alcohol", "5715"),
    ("intracerebral hemorrhage", "intracerebral hemorrhage", "431"),
]

# (short_title, long_title, icd9_code)
PROCEDURES: list[tuple[str, str, str]] = [
    ("venous cath nec", "venous catheterization, not elsewhere classified", "3893"),
    ("insert endotracheal tube", "insertion of endotracheal tube", "9604"),
    ("cont inv mec ven <96 hrs", "continuous invasive mechanical ventilation for less than 96 consecutive hours", "9671"),
    ("cont inv mec ven 96+ hrs", "continuous invasive mechanical ventilation for 96 consecutive hours or more", "9672"),
    ("enteral infus nutrit sub", "enteral infusion of concentrated nutritional substances", "9615"),
    ("packed cell transfusion", "transfusion of packed cells", "9904"),
    ("extracorporeal circulat", "extracorporeal circulation auxiliary to open heart surgery", "3961"),
    ("coronar arteriogr-2 cath", "coronary arteriography using two catheters", "8856"),
    ("left heart cardiac cath", "left heart cardiac catheterization", "3722"),
    ("ins drug-elut coronry st", "insertion of drug-eluting coronary artery stent(s)", "3607"),
    ("temporary tracheostomy", "temporary tracheostomy", "311"),
    ("hemodialysis", "hemodialysis", "3995"),
    ("arterial catheterization", "arterial catheterization", "3891"),
    ("spinal tap", "spinal tap", "0331"),
    ("percu endosc gastrostomy", "percutaneous [endoscopic] gastrostomy [peg]", "4311"),
    ("transfusion of plasma", "transfusion of other serum", "9907"),
    ("endosc control gast hem", "endoscopic control of gastric or duodenal bleeding", "4443"),
    ("part gastrec w jej anast", "partial gastrectomy with anastomosis to jejunum", "437"),
    ("exc/dest hrt lesion open", "excision or destruction of other lesion or tissue of heart, open approach", "3733"),
    ("appl ext fix-tib/fibula", "application of external fixator device, tibia and fibula", "7817"),
    ("(aorto)coronary bypass of one coronary artery", "(aorto)coronary bypass of one coronary artery", "3611"),
    ("thoracentesis", "thoracentesis", "3491"),
    ("closed bronchial biopsy", "closed [endoscopic] biopsy of bronchus", "3324"),
    ("colonoscopy", "colonoscopy", "4523"),
    ("opn aortic valvuloplasty", "open heart valvuloplasty of aortic valve without replacement", "3511"),
]

# (label, fluid, category, unit, low, high) — ranges are plausible result spreads, not reference ranges
LABS: list[tuple[str, str, str, str, float, float]] = [
    ("glucose", "blood", "chemistry", "mg/dl", 70, 250),
    ("potassium", "blood", "chemistry", "meq/l", 3.0, 5.8),
    ("sodium", "blood", "chemistry", "meq/l", 128, 148),
    ("chloride", "blood", "chemistry", "meq/l", 92, 112),
    ("bicarbonate", "blood", "chemistry", "meq/l", 16, 32),
    ("creatinine", "blood", "chemistry", "mg/dl", 0.5, 4.0),
    ("urea nitrogen", "blood", "chemistry", "mg/dl", 6, 60),
    ("anion gap", "blood", "chemistry", "meq/l", 8, 22),
    ("magnesium", "blood", "chemistry", "mg/dl", 1.4, 2.8),
    ("calcium, total", "blood", "chemistry", "mg/dl", 7.5, 10.5),
    ("phosphate", "blood", "chemistry", "mg/dl", 2.0, 6.0),
    ("hematocrit", "blood", "hematology", "%", 22, 48),
    ("hemoglobin", "blood", "hematology", "g/dl", 7, 16),
    ("platelet count", "blood", "hematology", "k/ul", 60, 450),
    ("white blood cells", "blood", "hematology", "k/ul", 3, 20),
    ("red blood cells", "blood", "hematology", "m/ul", 2.5, 5.8),
    ("mcv", "blood", "hematology", "fl", 78, 102),
    ("mch", "blood", "hematology", "pg", 26, 34),
    ("mchc", "blood", "hematology", "%", 31, 36),
    ("rdw", "blood", "hematology", "%", 11.5, 20.5),
    ("pt", "blood", "hematology", "sec", 11, 25),
    ("ptt", "blood", "hematology", "sec", 22, 60),
    ("inr(pt)", "blood", "hematology", "", 0.9, 3.5),
    ("lactate", "blood", "blood gas", "mmol/l", 0.5, 6.0),
    ("ph", "blood", "blood gas", "units", 7.2, 7.5),
    ("po2", "blood", "blood gas", "mm hg", 60, 200),
    ("pco2", "blood", "blood gas", "mm hg", 30, 60),
    ("base excess", "blood", "blood gas", "meq/l", -8, 6),
    ("alanine aminotransferase (alt)", "blood", "chemistry", "iu/l", 8, 120),
    ("asparate aminotransferase (ast)", "blood", "chemistry", "iu/l", 10, 140),
    ("alkaline phosphatase", "blood", "chemistry", "iu/l", 40, 250),
    ("bilirubin, total", "blood", "chemistry", "mg/dl", 0.2, 4.0),
    ("albumin", "blood", "chemistry", "g/dl", 2.0, 4.8),
    ("troponin t", "blood", "chemistry", "ng/ml", 0.01, 1.5),
    ("specific gravity", "urine", "hematology", "", 1.003, 1.030),
]

# (drug, route, dose value, dose unit, formulary code, drug type)
DRUGS: list[tuple[str, str, str, str, str, str]] = [
    ("potassium chloride", "po", "40", "meq", "kcl20", "main"),
    ("insulin", "sc", "4", "unit", "insulin", "main"),
    ("furosemide", "iv", "40", "mg", "furo40i", "main"),
    ("acetaminophen", "po", "650", "mg", "acet325", "main"),
    ("sodium chloride 0.9%  flush", "iv", "3", "ml", "nacl0.9flush", "main"),
    ("ns", "iv", "1000", "ml", "ns1000", "base"),
    ("d5w", "iv", "250", "ml", "d5w250", "base"),
    ("metoprolol tartrate", "po", "25", "mg", "meto25", "main"),
    ("heparin", "sc", "5000", "unit", "hep5i", "main"),
    ("pantoprazole", "po", "40", "mg", "pant40", "main"),
    ("docusate sodium", "po", "100", "mg", "docu100", "main"),
    ("senna", "po", "1", "tab", "senn187", "main"),
    ("magnesium sulfate", "iv", "2", "gm", "mag2pm", "main"),
    ("vancomycin", "iv", "1000", "mg", "vanc1f", "main"),
    ("morphine sulfate", "iv", "2", "mg", "morp2i", "main"),
    ("aspirin", "po", "81", "mg", "asa81", "main"),
    ("atorvastatin", "po", "40", "mg", "ator40", "main"),
    ("lorazepam", "iv", "1", "mg", "lora1i", "main"),
    ("ondansetron", "iv", "4", "mg", "ond4i", "main"),
    ("zolpidem tartrate", "po", "5", "mg", "zolp5", "main"),
    ("bisacodyl", "pr", "10", "mg", "bisa10r", "main"),
    ("lisinopril", "po", "10", "mg", "lisi10", "main"),
    ("amiodarone", "po", "200", "mg", "amio200", "main"),
    ("warfarin", "po", "5", "mg", "warf5", "main"),
    ("levothyroxine sodium", "po", "50", "mcg", "levo50", "main"),
    ("methimazole", "po", "10", "mg", "meth10", "main"),
    ("metformin xr (glucophage xr)", "po", "500", "mg", "metf500xr", "main"),
    ("hydrochlorothiazide", "po", "25", "mg", "hctz25", "main"),
    ("albuterol 0.083% neb soln", "inhalation", "1", "neb", "albu3h", "main"),
    ("ipratropium bromide neb", "inhalation", "1", "neb", "ipra2h", "main"),
    ("phenylephrine", "iv drip", "60", "mg", "phen40i", "main"),
    ("norepinephrine", "iv drip", "8", "mg", "nore4i", "main"),
    ("propofol", "iv drip", "1000", "mg", "prop100ig", "main"),
    ("fentanyl citrate", "iv", "50", "mcg", "fent100i", "main"),
    ("ceftriaxone", "iv", "1", "gm", "cef1i", "main"),
    ("piperacillin-tazobactam", "iv", "4.5", "gm", "pipt4.5i", "main"),
    ("famotidine", "po", "20", "mg", "famo20", "main"),
    ("simvastatin", "po", "20", "mg", "simv20", "main"),
    ("clopidogrel bisulfate", "po", "75", "mg", "clop75", "main"),
    ("prednisone", "po", "10", "mg", "pred10", "main"),
]

# chartevents items: (label, unit, low, high)
VITALS: list[tuple[str, str, float, float]] = [
    ("heart rate", "bpm", 55, 125),
    ("arterial bp [systolic]", "mmhg", 85, 170),
    ("arterial bp [diastolic]", "mmhg", 35, 95),
    ("arterial bp mean", "mmhg", 55, 115),
    ("respiratory rate", "insp/min", 10, 32),
    ("sao2", "%", 86, 100),
    ("temperature c (calc)", "deg. c", 35.8, 39.4),
    ("admit wt", "kg", 45, 140),
    ("admit ht", "cm", 150, 195),
]
# inputevents_cv items: (label, low ml, high ml)
INPUTS: list[tuple[str, float, float]] = [
    ("d5w", 10, 250), (".9% normal saline", 50, 1000), ("lactated ringers", 100, 1000), ("d10w", 10, 100),
    ("tpn", 40, 120), ("packed rbc's", 250, 350), ("fresh frozen plasma", 200, 300), ("propofol", 5, 40),
    ("insulin", 1, 10), ("heparin", 5, 20), ("po intake", 60, 480), ("free water bolus", 50, 250),
]
# outputevents items: (label, low ml, high ml)
OUTPUTS: list[tuple[str, float, float]] = [
    ("foley", 20, 400), ("void", 100, 600), ("chest tubes cticu ct 1", 10, 150), ("stool out fecal bag", 50, 400),
    ("ostomy (output)", 50, 300), ("jackson pratt #1", 10, 120), ("oral gastric", 20, 300), ("urine out incontinent", 50, 300),
]
SPECIMENS = ["blood culture", "urine", "sputum", "swab", "mrsa screen", "stool", "catheter tip-iv", "pleural fluid", "bronchoalveolar lavage"]
ORGANISMS = ["staph aureus coag +", "escherichia coli", "klebsiella pneumoniae", "pseudomonas aeruginosa", "enterococcus sp.", "yeast", "staphylococcus, coagulase negative"]
CAREUNITS = ["micu", "sicu", "ccu", "csru", "tsicu"]
WARDS = [12, 14, 15, 20, 23, 29, 32, 33, 50, 52, 55, 57]
ADMISSION_LOCATIONS = ["emergency room admit", "phys referral/normal deli", "clinic referral/premature", "transfer from hosp/extram", "transfer from skild nur"]
DISCHARGE_LOCATIONS = ["home", "home health care", "snf", "rehab/distinct part hosp", "dead/expired", "long term care hospital"]
ADMISSION_TYPES = ["emergency", "elective", "urgent"]
INSURANCES = ["medicare", "private", "medicaid", "government", "self pay"]
MARITAL = ["married", "single", "widowed", "divorced", "separated"]
ETHNICITIES = ["white", "black/african american", "hispanic or latino", "asian", "unknown/not specified", "white - russian", "american indian/alaska native"]
LANGUAGES = ["engl", "span", "russ", "ptun", "cant"]
RELIGIONS = ["catholic", "protestant quaker", "jewish", "not specified", "unobtainable", "episcopalian"]
FIRST_NAMES = ["james", "mary", "robert", "patricia", "john", "jennifer", "michael", "linda", "david", "elizabeth", "william", "barbara", "richard", "susan", "joseph", "jessica", "thomas", "sarah", "charles", "karen", "evelyn", "ida", "jerry", "anna"]
LAST_NAMES = ["smith", "johnson", "williams", "brown", "jones", "garcia", "miller", "davis", "rodriguez", "martinez", "wilson", "anderson", "thomas", "taylor", "moore", "jackson", "martin", "lee", "thompson", "white", "lawrence", "cook", "deberry"]
ADMIT_DIAGNOSES = ["pneumonia", "sepsis", "congestive heart failure", "coronary artery disease", "gastrointestinal bleed", "chest pain", "altered mental status", "hypoxia", "overdose", "abdominal pain", "stroke", "fever"]

# --- eICU -------------------------------------------------------------------------------------------------
EICU_DIAGNOSES: list[tuple[str, str]] = [  # (diagnosisname, icd9code)
    ("acute respiratory failure", "518.81, j96.00"),
    ("hypertension", "401.9, i10"),
    ("sepsis", "038.9, a41.9"),
    ("acute renal failure", "584.9, n17.9"),
    ("diabetes mellitus", "250.00, e11.9"),
    ("atrial fibrillation", "427.31, i48.0"),
    ("anemia", "285.9, d64.9"),
    ("hypokalemia", "276.8, e87.6"),
    ("pneumonia", "486, j18.9"),
    ("congestive heart failure", "428.0, i50.9"),
    ("hyperglycemia", "790.6, r73.9"),
    ("acute coronary syndrome", "411.1, i24.9"),
    ("pancreatitis - acute", "577.0, k85.9"),
    ("gi obstruction / ileus - small bowel obstruction", "560.9, k56.60"),
    ("bradycardia - complete heart block", "426.0, i44.2"),
    ("anemia - acute blood loss anemia", "285.1, d62"),
    ("change in mental status", "780.09, r41.82"),
    ("hypotension", "458.9, i95.9"),
    ("copd", "491.20, j44.9"),
    ("septic shock", "785.52, r65.21"),
]
EICU_TREATMENTS = [
    "mechanical ventilation", "normal saline administration", "antibacterials - penicillins", "vasopressors - norepinephrine > 0.1 micrograms/kg/min",
    "oxygen therapy (< 40%)", "insulin", "stress ulcer prophylaxis - pantoprazole", "vte prophylaxis - low molecular weight heparin",
    "chest x-ray", "analgesics - bolus parenteral analgesics", "electrolyte administration - potassium", "cultures", "intubation",
    "hemodialysis", "glucose - d50", "diuretic - furosemide", "transfusion of red blood cells",
]
# (labname, low, high) — eICU lab names are lower-case with eICU's own spellings
EICU_LABS: list[tuple[str, float, float]] = [
    ("glucose", 70, 250), ("potassium", 3.0, 5.8), ("sodium", 128, 148), ("chloride", 92, 112), ("bicarbonate", 16, 32),
    ("creatinine", 0.5, 4.0), ("bun", 6, 60), ("anion gap", 8, 22), ("magnesium", 1.4, 2.8), ("calcium", 7.5, 10.5),
    ("hgb", 7, 16), ("hct", 22, 48), ("platelets x 1000", 60, 450), ("wbc x 1000", 3, 20), ("rbc", 2.5, 5.8), ("mcv", 78, 102),
    ("rdw", 11.5, 20.5), ("pt - inr", 0.9, 3.5), ("lactate", 0.5, 6.0), ("ph", 7.2, 7.5), ("pao2", 60, 200), ("paco2", 30, 60),
    ("-monos", 2, 14), ("-lymphs", 5, 40), ("fe", 20, 160), ("tv", 300, 600), ("total bilirubin", 0.2, 4.0), ("albumin", 2.0, 4.8),
    ("bedside glucose", 70, 250), ("troponin - i", 0.01, 1.5),
]
# (drugname, routeadmin, dosage)
EICU_DRUGS: list[tuple[str, str, str]] = [
    ("potassium chloride", "iv", "20 meq"), ("furosemide", "iv", "40 mg"), ("acetaminophen", "po", "650 mg"),
    ("pantoprazole", "iv", "40 mg"), ("heparin", "subcutan", "5000 units"), ("insulin aspart", "subcutan", "2 units"),
    ("ondansetron", "iv", "4 mg"), ("aspirin", "oral", "81 mg"), ("levothyroxine", "oral", "50 mcg"), ("lorazepam 0.5 mg tab", "oral", "0.5 mg"),
    ("morphine 4 mg/ml syringe : 1 ml syringe", "intravenous", "2 mg"), ("sodium chloride 0.9%", "iv", "1000 ml"),
    ("nss 0.9% 1,000 ml bolus infusion", "iv", "1000 ml"), ("ecotrin ec", "oral", "81 mg"), ("metoprolol tartrate 25 mg po tabs", "po", "25 mg"),
    ("propofol 1% inj", "iv", "10 mcg/kg/min"), ("norepinephrine", "iv", "4 mcg/min"), ("zofran", "iv", "4 mg"), ("lasix", "iv", "40 mg"),
    ("atorvastatin", "oral", "40 mg"), ("ceftriaxone", "iv", "1 g"), ("vancomycin", "iv", "1 g"),
]
EICU_INTAKES = ["ivpb", "p.o.", "volume (ml)-norepinephrine", "enteral tube intake", "intake ns", "propofol", "continuous infusion meds", "d5w"]
EICU_OUTPUTS = ["urine", "urine catheter", "urinary catheter output: indwelling/continuous ure", "stool", "indwelling catheter", "output (ml)-chest tube #1", "emesis"]
EICU_CULTURE_SITES = ["blood, venipuncture", "urine, catheter specimen", "sputum, tracheal specimen", "nasopharynx", "wound, decubitus", "bronchial lavage", "other", "urine, voided specimen"]
EICU_ALLERGIES = ["penicillins", "sulfa (sulfonamide antibiotics)", "codeine", "morphine", "latex", "iodine", "cephalexin"]
EICU_ADMIT_SOURCES = ["emergency department", "direct admit", "floor", "operating room", "other hospital"]
EICU_ETHNICITIES = ["caucasian", "african american", "hispanic", "asian", "native american", "other/unknown"]
