"""The MLflow Model Registry: register a trained model with its provenance, and promote it only on evidence.

evaluation.py    the Evaluation record: per-task scores, the tasks' content hashes, the conditions they were played under
content.py       content hashes of coding tasks and DiagGym cases
conditions.py    a rollout's conditions, and how two evaluations' conditions differ
rollout.py       a rollout folder's episodes as an Evaluation, against the task file it played
significance.py  the exact paired test, and the alpha each look is spent to
decision.py      the pure rule: pairing on content and conditions, the paired test, the reason
selection.py     which trained policy a pipeline registers: the best on valid, and how often test was read
store.py         the MLflow side: register, the champion, evaluations read back, looks counted
"""

from components.registry.conditions import as_conditions
from components.registry.content import case_hashes, task_hashes
from components.registry.decision import Comparison, RegistryConfig, decide
from components.registry.evaluation import Evaluation
from components.registry.rollout import rollout_evaluation
from components.registry.selection import Candidate, Selection, select, unselected, valid_figure
from components.registry.store import (
    LOOK_TAG,
    TASK_SUCCESS_TAG,
    Decision,
    git_commit,
    read_evaluation,
    register,
    registered_version,
)

__all__ = ["LOOK_TAG", "TASK_SUCCESS_TAG", "Candidate", "Comparison", "Decision", "Evaluation", "RegistryConfig",
           "Selection", "as_conditions", "case_hashes", "decide", "git_commit", "read_evaluation", "register",
           "registered_version", "rollout_evaluation", "select", "task_hashes", "unselected", "valid_figure"]
