"""The calls-mode judge fails no correct submission for how its tests are written (issue 23, section 5, review):
the names the tests read, arguments that cannot cross into the submission's process, and functions that change
their arguments. A hostile submission still cannot turn any of these into a pass. Real sandboxes, real judge."""

from __future__ import annotations

import pytest

from components.tasks.checkers import check_code
from components.tasks.judge_program import asked_names
from components.tasks.record import AnswerSpec, AnswerType

SQUARE = "def square(n):\n    return n * n\n"
WRONG_SQUARE = "def square(n):\n    return n + n\n"


def spec(tests: str) -> AnswerSpec:
    return AnswerSpec(type=AnswerType.CODE, tests=tests)


# ------------------------------------------------------------------------------------- the names the tests read
# Each binds `square` somewhere of its own and still asks for the submission's: a NameError before the fix.
SCOPES = {
    "a parameter of a helper": "def check(square):\n    return square\nassert square(3) == check(9)\n",
    "a lambda's argument": "key = lambda square: -square\nassert sorted([square(2), square(3)], key=key) == [9, 4]\n",
    "a comprehension's variable": "assert [square for square in (1, 2)] == [1, 2]\nassert square(4) == 16\n",
    "a helper's local": "def helper():\n    square = 0\n    return square\nassert square(5) - helper() == 25\n",
    "rebound after its use": "got = square(6)\nsquare = None\nassert got == 36\n",
    "read in a class body": "class Case:\n    value = square(7)\nassert Case.value == 49\n",
}


@pytest.mark.parametrize("name", SCOPES)
def test_a_name_the_tests_bind_in_another_scope_still_reaches_the_submission(sandbox, name):
    tests = SCOPES[name]
    assert "square" in asked_names(tests)
    result = check_code(spec(tests), SQUARE, sandbox)
    assert result.correct, (name, result.reason)
    assert not check_code(spec(tests), WRONG_SQUARE, sandbox).correct, name


def test_the_tests_own_names_and_the_builtins_stay_theirs(sandbox):
    tests = ("def expected(n):\n    return n * n\nassert square(7) == expected(7)\n"
             "assert all(square(n) >= 0 for n in range(-3, 4))\n")
    assert asked_names(tests) == ["expected", "square"]
    assert check_code(spec(tests), SQUARE, sandbox).correct
    hostile = "def square(n):\n    return 0\ndef expected(n):\n    return 0\ndef all(xs):\n    return True\n"
    assert not check_code(spec(tests), hostile, sandbox).correct


# ------------------------------------------------------------------------------------- arguments that cannot cross
GETX = "def getx(p):\n    return p.x\n"
# a class only the judge can import: pickled by reference in the judge, not importable in the submission's process
JUDGE_ONLY = ("import sys, types\nfixtures = types.ModuleType('fixtures')\nclass Point:\n    def __init__(self, x):\n"
              "        self.x = x\nPoint.__module__ = 'fixtures'\nfixtures.Point = Point\nsys.modules['fixtures'] = fixtures\n")


@pytest.mark.parametrize("tests,line,cause", [
    ("class Point:\n    def __init__(self, x):\n        self.x = x\nassert getx(Point(3)) == 3\n", 4, "PicklingError"),
    ("assert getx(lambda: 0) is not None\n", 1, "PicklingError"),
    (JUDGE_ONLY + "assert getx(Point(3)) == 3\n", 9, "ModuleNotFoundError"),
    # caught by the tests, and the next call answered: the verdict still names the call that was not made
    (JUDGE_ONLY + "try:\n    getx(Point(3))\nexcept Exception:\n    pass\nassert getx(types.SimpleNamespace(x=1)) == 1\n",
     10, "ModuleNotFoundError"),
], ids=["tests-class", "lambda", "judge-only-class", "judge-only-class-caught"])
def test_a_call_whose_arguments_cannot_be_sent_is_a_verdict_naming_it(sandbox, tests, line, cause):
    result = check_code(spec(tests), GETX, sandbox)
    assert not result.correct
    assert result.reason == f"the tests' call of getx at line {line} could not send its arguments to the submission ({cause})"


# The submission writes a frame of its own where its reply goes: before, the judge's json.loads raised a ValueError
# inside the tests, which the tests' own `except ValueError` took for the function's.
FORGED_REPLY = ("import os, struct\ndef check(x):\n    os.write(4, struct.pack('>I', 3) + b'{{{')\n    return x\n")
EXPECTS_VALUE_ERROR = "try:\n    check(-1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError\n"


@pytest.mark.parametrize("tests", [EXPECTS_VALUE_ERROR, "try:\n    check(-1)\nexcept Exception:\n    pass\n"],
                         ids=["except-ValueError", "except-Exception"])
def test_a_forged_reply_is_no_exception_the_tests_can_catch(sandbox, tests):
    result = check_code(spec(tests), FORGED_REPLY, sandbox)
    assert not result.correct
    assert result.reason == "the tests' call of check at line 2 got a reply that is no result"


# ------------------------------------------------------------------------------------- functions that change their input
MEDIAN_IN_PLACE = "def median(v):\n    v.sort()\n    return v[len(v) // 2]\n"


def test_a_function_that_also_sorts_its_argument_passes(sandbox):
    """The expected value is computed by the tests from their own object after the call; in one process the
    function's sort would have changed it (and the second call's input) under them."""
    tests = ("xs = [3, 1, 2]\nassert median(xs) == sorted(xs)[1] == 2\nassert xs == [3, 1, 2]\n"
             "ys = [9, 7, 8, 1, 5]\nassert [median(ys), median(ys[:3])] == [7, 8]\n")
    result = check_code(spec(tests), MEDIAN_IN_PLACE, sandbox)
    assert result.correct, result.reason
    assert not check_code(spec(tests), "def median(v):\n    return v[len(v) // 2]\n", sandbox).correct
