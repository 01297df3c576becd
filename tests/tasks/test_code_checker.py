"""Bug 3 of the published checkers: any successful execution counted as correct. Real sandbox, real code."""

from __future__ import annotations

import pytest

from components.sandbox.factory import open_sandbox
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


def test_biocoder_style_harness_compares_output(sandbox):
    harness = "import math\n<<insert solution here>>\ndef main():\n    print(area(2.0))\nmain()\n"
    spec = AnswerSpec(type=AnswerType.CODE, tests=harness, expected_output="12.566370614359172")
    assert check_code(spec, "def area(r):\n    return math.pi * r * r\n", sandbox).correct
    assert not check_code(spec, "def area(r):\n    return 3.14 * r * r\n", sandbox).correct


def test_code_spec_needs_tests():
    with pytest.raises(ValueError):
        AnswerSpec(type=AnswerType.CODE)
    assert not check_value(AnswerSpec(type=AnswerType.INTEGER), 1, None).correct
