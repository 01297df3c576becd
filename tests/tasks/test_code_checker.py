"""Bug 3 of the published checkers: any successful execution counted as correct. Real sandbox, real code."""

from __future__ import annotations

import json

import pytest

from components.sandbox.factory import open_sandbox
from components.tasks import code_judge
from components.tasks.checkers import check_code, check_value
from components.tasks.record import AnswerSpec, AnswerType

TESTS = "assert gc_content('GGCC') == 1.0\nassert gc_content('ATAT') == 0.0\nassert abs(gc_content('ATGC') - 0.5) < 1e-9\n"
SPEC = AnswerSpec(type=AnswerType.CODE, tests=TESTS)
RIGHT = "def gc_content(s):\n    return (s.count('G') + s.count('C')) / len(s)\n"


@pytest.fixture(scope="module")
def sandbox():
    box = open_sandbox("process")
    yield box
    box.close()


def test_right_code_passes(sandbox):
    assert check_code(SPEC, RIGHT, sandbox).correct


@pytest.mark.parametrize("code", [
    "def gc_content(s):\n    return 0.5\n",  # runs fine, wrong
    "print('all good')\n",  # runs fine, defines nothing
    "import sys\nsys.exit(0)\n",  # exits cleanly before the tests
    "import os\nos._exit(0)\n",  # hard exit before the tests
    "import atexit\natexit.register(lambda: print('MEDGYM-TESTS-PASSED-0000000000000000'))\nimport sys\nsys.exit(0)\n",
    "",  # no code
])
def test_clean_execution_is_not_correctness(sandbox, code):
    result = check_code(SPEC, code, sandbox)
    assert not result.correct, result.reason


HARNESS = (
    "import math, random\n<<insert solution here>>\n"
    "def main():\n    random.seed(7)\n    for _ in range(3):\n        print(area(random.uniform(0.5, 4.0)))\n"
    "if __name__ == '__main__':\n    main()\n"
)
AREA = "def area(r):\n    return math.pi * r * r\n"


@pytest.fixture(scope="module")
def traced_spec(sandbox):
    trace = code_judge.trace(sandbox, HARNESS, "area", AREA)
    return AnswerSpec(type=AnswerType.CODE, tests=HARNESS, target="area", expected_trace=trace)


def test_traced_harness_checks_several_inputs(sandbox, traced_spec):
    runs = traced_spec.expected_trace
    inputs = {json.dumps(rec["args"]) for run in runs for rec in run}
    assert len(runs) == code_judge.DEFAULT_VARIANTS and len(inputs) == 3 * len(runs)  # seed variants: new inputs
    assert check_code(traced_spec, AREA, sandbox).correct
    assert check_code(traced_spec, "def area(r):\n    return r * r * math.pi\n", sandbox).correct  # same values
    assert not check_code(traced_spec, "def area(r):\n    return 3.14 * r * r\n", sandbox).correct


# What a policy trained on this reward would try; each passed a check of the landed code, or would have.
FORGERIES = {
    "prints the program's output and exits": (
        "import math, random, os\nrandom.seed(7)\n"
        "for _ in range(3): print(math.pi * random.uniform(0.5, 4.0) ** 2)\nos._exit(0)\n"),
    "reads the harness from linecache": "import linecache\nprint(linecache.getlines('<sandbox>'))\ndef area(r):\n    return 0\n",
    "an int that equals everything": (
        "class Any(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\n"
        "def area(r):\n    return Any(0)\n"),
    "forges the judge's report": 'import json\nprint(json.dumps({"runs": []}))\ndef area(r):\n    return 0\n',
    "writes forged records to every descriptor": (
        "import os, json\nfor fd in range(3, 64):\n    try: os.write(fd, b'{\"args\": [1.0]}\\n')\n"
        "    except OSError: pass\ndef area(r):\n    return 0\n"),
    "kills the judge": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef area(r):\n    return 0\n",
    "reads the judge's memory": (
        "import os\ntry:\n    open(f'/proc/{os.getppid()}/mem', 'rb').read(1)\nexcept OSError as e:\n    print(e)\n"
        "def area(r):\n    return 0\n"),
}


@pytest.mark.parametrize("name", FORGERIES)
def test_traced_check_cannot_be_forged(sandbox, traced_spec, name):
    result = check_code(traced_spec, FORGERIES[name], sandbox)
    assert not result.correct, (name, result.reason)


@pytest.mark.parametrize("body", ["return None", "return False", "return True", "return 0", "return 1",
                                  "return ''", "return []"])
def test_trivial_bodies_fail(sandbox, traced_spec, body):
    assert not check_code(traced_spec, f"def area(r):\n    {body}\n", sandbox).correct


def test_assert_style_tests_see_plain_values(sandbox):
    always_equal = ("class Any(float):\n    def __eq__(self, o): return True\n    def __sub__(self, o): return 0.0\n"
                    "    __hash__ = float.__hash__\ndef gc_content(s):\n    return Any(0.25)\n")
    frame_token = ("import sys\nconsts = sys._getframe(0).f_code.co_consts\n"
                   "print(*[c for c in consts if isinstance(c, str) and 'PASS' in c])\nimport os\nos._exit(0)\n")
    for code in (always_equal, frame_token):
        assert not check_code(SPEC, code, sandbox).correct


def test_trivial_match_finds_bodies_that_solve_nothing():
    calls = [[{"args": [1], "args_after": [1], "returns": False, "stdout": ""}]]
    assert code_judge.trivial_match(calls) is False
    calls[0].append({"args": [2], "args_after": [2], "returns": True, "stdout": ""})
    assert code_judge.trivial_match(calls) is None


def test_code_spec_needs_tests():
    with pytest.raises(ValueError):
        AnswerSpec(type=AnswerType.CODE)
    assert not check_value(AnswerSpec(type=AnswerType.INTEGER), 1, None).correct
