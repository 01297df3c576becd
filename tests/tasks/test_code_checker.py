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


def call(args: list, returns: object = None, **extra: object) -> dict:
    return {"args": args, "kwargs": {"dict": []}, "args_after": args, "returns": returns, "stdout": "", **extra}


def test_cheap_guesses_are_found_in_a_trace():
    """Bodies that ignore the task: one fixed value (a module constant, a literal), one exception, an input."""
    assert code_judge.cheap_guess([[call([1], "8-bit")], [call([2], "8-bit")]]) == "return one fixed value"
    assert code_judge.cheap_guess([[call([1], 2.0)], [call([2], 2.0000000001)]]) == "return one fixed value"
    raising = [[{**call([1]), "raises": "KeyError"}], [{**call([2]), "raises": "KeyError"}]]
    assert code_judge.cheap_guess(raising) == "raise KeyError"
    assert code_judge.cheap_guess([[call(["ab", 3], "ab")], [call(["cd", 1], "cd")]]) == "return argument 1"
    obj = {"object": "__main__.Token", "attrs": {"dict": [["text", "Hi"]]}}
    assert code_judge.cheap_guess([[call([0], "Hi", self=obj, self_after=obj)], [call([2], "Hi", self=obj, self_after=obj)]])
    other = {"object": "__main__.Token", "attrs": {"dict": [["text", "Yo"]]}}
    method = [[call([], "Hi", self=obj, self_after=obj)], [call([], "Yo", self=other, self_after=other)]]
    assert code_judge.cheap_guess(method) == "return self.text"


def test_a_trace_that_needs_the_work_has_no_cheap_guess():
    assert code_judge.cheap_guess([[call([2], 4)], [call([3], 9)]]) is None
    assert code_judge.cheap_guess([[call([2], 2)], [call([3], 9)]]) is None  # one call echoes, the other does not
    printed = [[{**call([1], 0), "stdout": "1\n"}], [{**call([2], 0), "stdout": "2\n"}]]
    assert code_judge.cheap_guess(printed) is None  # a body that only returns cannot print
    changed = [[{**call([[2, 1]], None), "args_after": [[1, 2]]}], [{**call([[4, 3]], None), "args_after": [[3, 4]]}]]
    assert code_judge.cheap_guess(changed) is None  # sorts its argument in place
    assert code_judge.cheap_guess([[call([1], 1)], [{"more": 201}]]) is None  # not every call was recorded


def test_distinct_inputs_count_the_object_and_the_arguments():
    obj = {"object": "x", "attrs": {"dict": [["n", 1]]}}
    assert code_judge.distinct_inputs([[call([1], 1)], [call([1], 1)], [call([1], 1)]]) == 1
    assert code_judge.distinct_inputs([[call([1], 1), call([2], 1)], [], []]) == 2
    assert code_judge.distinct_inputs([[call([], 1, self=obj)], [call([], 1, self={**obj, "attrs": {"dict": []}})]]) == 2


def test_code_spec_needs_tests():
    with pytest.raises(ValueError):
        AnswerSpec(type=AnswerType.CODE)
    assert not check_value(AnswerSpec(type=AnswerType.INTEGER), 1, None).correct
