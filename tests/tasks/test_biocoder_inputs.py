"""BioCoder-style traced tasks: each is checked on several inputs, or refused at import with the reason, and no
cheap guess (one fixed value, one exception, one of its own inputs) reproduces an imported task. Real sandbox."""

from __future__ import annotations

import json

import pytest

from components.sandbox.factory import open_sandbox
from components.tasks import code_judge
from components.tasks.checkers import check_code
from components.tasks.importers.medagentgym import ImportOptions, import_release
from components.tasks.record import AnswerSpec, AnswerType, load_tasks


@pytest.fixture(scope="module")
def sandbox():
    box = open_sandbox("process")
    yield box
    box.close()


SCIPY_HARNESS = (
    "import numpy as np\nimport scipy.stats\nfrom sklearn.utils import check_random_state\n<<insert solution here>>\n"
    "def main():\n    xs = np.random.RandomState(5).randint(0, 100, size=4).tolist()\n"
    "    ys = check_random_state(6).randint(0, 100, size=4).tolist()\n    print(spread(xs), spread(ys))\n"
    "if __name__ == '__main__':\n    main()\n"
)
SPREAD = "def spread(xs):\n    return max(xs) - min(xs)\n"


def test_every_seed_variant_reaches_the_function(sandbox):
    """The seed replacement keeps np.random.RandomState a type: scipy.stats imports and sklearn accepts it."""
    runs = code_judge.trace(sandbox, SCIPY_HARNESS, "spread", SPREAD)
    assert [code_judge.calls_recorded([run]) for run in runs] == [2] * code_judge.DEFAULT_VARIANTS
    assert code_judge.distinct_inputs(runs) == 2 * code_judge.DEFAULT_VARIANTS
    spec = AnswerSpec(type=AnswerType.CODE, tests=SCIPY_HARNESS, target="spread", expected_trace=runs)
    assert check_code(spec, SPREAD, sandbox).correct
    assert not check_code(spec, "def spread(xs):\n    return max(xs)\n", sandbox).correct


def row(name: str, main_body: str, solution: str, head: str = "import random\n") -> dict:
    context = f"{head}<<insert solution here>>\ndef main():\n{main_body}if __name__ == '__main__':\n    main()\n"
    return {"idx": name, "problem": f"write {name}", "context": context, "solution": solution,
            "signature": solution.splitlines()[0].rstrip(":"), "code": ""}


ROWS = [
    # kept: a seeded input that each variant changes, and an answer that depends on it
    row("total", "    random.seed(3)\n    print(total([random.randint(1, 9) for _ in range(5)]))\n",
        "def total(xs):\n    return sum(xs)\n"),
    # one input whatever the seed: `return 'Hello'` would pass
    row("first_word", "    print(first_word('Hello World'))\n", "def first_word(text):\n    return text.split()[0]\n"),
    # one value for every input: a module constant would pass
    row("depth", "    random.seed(3)\n    print(depth(random.random()))\n", "def depth(x):\n    return BIT_DEPTH_8\n",
        head="import random\nBIT_DEPTH_8 = '8-bit integer'\n"),
    # hands back its argument for every input it is given
    row("clean", "    random.seed(3)\n    print(clean([random.choice('ACGT') for _ in range(6)]))\n",
        "def clean(seq):\n    return [c for c in seq if c in 'ACGTN']\n"),
    # raises one exception for every input
    row("ratio", "    random.seed(3)\n    try:\n        print(ratio(random.randint(1, 9)))\n    except ZeroDivisionError:\n"
        "        print('none')\n", "def ratio(n):\n    return n / 0\n"),
]


def test_tasks_a_cheap_guess_passes_are_refused_with_the_reason(tmp_path):
    src = tmp_path / "src" / "biocoder"
    src.mkdir(parents=True)
    (src / "test_tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    report = import_release(src.parent, tmp_path / "out", ImportOptions(open_sandbox=lambda: open_sandbox("process")))
    assert [t.task_id for t in load_tasks(tmp_path / "out" / "tasks.jsonl")] == ["biocoder/test/0"]
    assert report.per_file["biocoder/test"].refused == {
        "the program gives the function one input only, under every seed variant": 1,
        "a body that ignores the task reproduces every call: return one fixed value": 1,
        "a body that ignores the task reproduces every call: return argument 1": 1,
        "a body that ignores the task reproduces every call: raise ZeroDivisionError": 1,
    }
