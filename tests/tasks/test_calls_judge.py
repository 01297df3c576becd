"""Assert-style code checks (`calls` mode) against hostile submissions: real process and Docker sandboxes, real judge.

Each hostile submission below passed the landed judge (the submission ran in a fork of the judge, and every
callable it defined became a name in the tests' scope); each must fail now, and the right answers must pass.
"""

from __future__ import annotations

import pytest

from components.sandbox.factory import open_sandbox
from components.tasks.checkers import check_code
from components.tasks.record import AnswerSpec, AnswerType
from tests.sandbox.conftest import require_backend
from tests.tasks.conftest import BACKENDS


def spec(tests: str) -> AnswerSpec:
    return AnswerSpec(type=AnswerType.CODE, tests=tests)


@pytest.fixture(params=BACKENDS)
def fresh_sandbox(request):
    """For submissions that write files: what they leave must not reach the next check."""
    require_backend(request.param)
    box = open_sandbox(request.param)
    yield box
    box.close()


# ------------------------------------------------------------------------------------- reading the expected values
SECRET_TESTS = "assert lookup(3) == 'kestrel-4417'\nassert lookup(8) == 'heron-2290'\n"
SECRET_RIGHT = "def lookup(n):\n    return {3: 'kestrel-4417', 8: 'heron-2290'}.get(n)\n"

# Finds the tests' text wherever `_search` (below) looks, parses `lookup(<arg>) == <value>` out of it and answers from
# that table. Strings are followed into JSON (the judge's config) and into Python source (the judge's program).
LEAK = '''
import ast, json, sys
TABLE = {}
def _read(text, depth=0):
    if depth > 3 or not isinstance(text, str) or "lookup(" not in text:
        return
    try:
        tree = ast.parse(text)
    except Exception:
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Call)
                    and getattr(node.left.func, "id", "") == "lookup"):
                TABLE[ast.literal_eval(node.left.args[0])] = ast.literal_eval(node.comparators[0])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                _read(node.value, depth + 1)
    try:
        _look(json.loads(text), depth + 1)
    except Exception:
        pass
def _look(obj, depth=0):
    if isinstance(obj, str):
        _read(obj, depth)
    elif isinstance(obj, dict) and depth < 4:
        for v in list(obj.values()):
            _look(v, depth + 1)
    elif isinstance(obj, (list, tuple)) and depth < 4:
        for v in list(obj):
            _look(v, depth + 1)
'''
SEARCHES = {
    "walks the frames up to the judge": (
        "f = sys._getframe()\nwhile f is not None:\n    _look(dict(f.f_locals))\n    _look(dict(f.f_globals))\n"
        "    f = f.f_back\n"),
    "walks every object the collector tracks": "import gc\nfor o in gc.get_objects():\n    _look(o)\n",
    "reads the line cache": "import linecache\nfor entry in list(linecache.cache.values()):\n    _look(''.join(entry[2]))\n",
    "reads the judge's command line and environment": (
        "import os\nfor p in ('/proc/self/cmdline', f'/proc/{os.getppid()}/cmdline', f'/proc/{os.getppid()}/environ'):\n"
        "    try:\n        _look(open(p, 'rb').read().replace(b'\\0', b'\\n').decode(errors='replace'))\n"
        "    except OSError:\n        pass\n"),
    "reads every file it can reach": (
        "import os\nfor top in ('.', '/tmp', '/dev/shm'):\n    for d, _, fs in os.walk(top):\n        for f in fs:\n"
        "            try:\n                _look(open(os.path.join(d, f), errors='replace').read())\n"
        "            except OSError:\n                pass\n"),
}


def leak(search: str) -> str:
    return f"{LEAK}\n{search}\ndef lookup(n):\n    return TABLE.get(n)\n"


def test_right_answer_passes(sandbox):
    assert check_code(spec(SECRET_TESTS), SECRET_RIGHT, sandbox).correct


@pytest.mark.parametrize("name", SEARCHES)
def test_submission_cannot_read_the_expected_values(sandbox, name):
    result = check_code(spec(SECRET_TESTS), leak(SEARCHES[name]), sandbox)
    assert not result.correct, (name, result.reason)


# ------------------------------------------------------------------------------------- the tests' own names
BUILTIN_TESTS = {
    "all": "assert all([x > 0 for x in positives(4)])\n",
    "isinstance": "assert isinstance(positives(2), list)\n",
    "len": "assert len(positives(3)) == 3\n",
    "sorted": "assert sorted(positives(3)) == [1, 2, 3]\n",
}
POSITIVES = "def positives(n):\n    return list(range(1, n + 1))\n"


@pytest.mark.parametrize("builtin", BUILTIN_TESTS)
def test_builtins_the_submission_redefines_stay_the_real_ones(sandbox, builtin):
    tests = BUILTIN_TESTS[builtin]
    assert check_code(spec(tests), POSITIVES, sandbox).correct
    answer = {"len": "3", "sorted": "[1, 2, 3]"}.get(builtin, "True")
    wrong = "-1" if builtin == "isinstance" else "[-1]"
    hostile = f"def positives(n):\n    return {wrong}\ndef {builtin}(*args, **kwargs):\n    return {answer}\n"
    result = check_code(spec(tests), hostile, sandbox)
    assert not result.correct, (builtin, result.reason)


def test_only_the_names_the_tests_ask_for_reach_them(sandbox):
    """A helper the tests define for themselves is theirs, whatever the submission defines under that name."""
    tests = "def expected(n):\n    return n * n\nassert square(7) == expected(7)\n"
    assert check_code(spec(tests), "def square(n):\n    return n * n\n", sandbox).correct
    hostile = "def square(n):\n    return 0\ndef expected(n):\n    return 0\n"
    assert not check_code(spec(tests), hostile, sandbox).correct


# ------------------------------------------------------------------------------------- results the submission made
EQ_TESTS = "assert doubled([1, 2, 3]) == [2, 4, 6]\nassert doubled([]) == []\n"
EQ_RIGHT = "def doubled(xs):\n    return [2 * x for x in xs]\n"
EQUAL_TO_EVERYTHING = {
    "a list that equals everything": "class R(list):\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n",
    "an object that equals everything": "class R:\n    def __init__(self, *a): pass\n    def __eq__(self, o): return True\n",
    "a string that equals everything": (
        "class R(str):\n    def __eq__(self, o): return True\n    __hash__ = str.__hash__\n"),
    "an object that claims to be a list": (
        "class R:\n    __class__ = property(lambda self: list)\n    def __init__(self, *a): pass\n"
        "    def __eq__(self, o): return True\n    def __len__(self): return 3\n"),
}


@pytest.mark.parametrize("name", EQUAL_TO_EVERYTHING)
def test_results_are_compared_as_plain_values(sandbox, name):
    assert check_code(spec(EQ_TESTS), EQ_RIGHT, sandbox).correct
    hostile = EQUAL_TO_EVERYTHING[name] + "def doubled(xs):\n    return R([0])\n"
    result = check_code(spec(EQ_TESTS), hostile, sandbox)
    assert not result.correct, (name, result.reason)


def test_results_arrive_as_the_base_types_they_were(sandbox):
    """Tuples, dicts, sets, bytes, complex numbers and arrays compare as themselves (not as their wire form)."""
    tests = ("import numpy as np\nassert pair(2) == (2, 4)\nassert counts('AAC') == {'A': 2, 'C': 1}\n"
             "assert uniq([1, 1, 2]) == {1, 2}\nassert raw() == b'ACGT'\nassert root() == 1j\n"
             "assert (ramp(3) == np.arange(3)).all() and ramp(3).dtype == np.int64\n"
             "assert keyed() == {(1, 2): frozenset({3})}\n")
    right = ("import numpy as np\nfrom collections import Counter\ndef pair(n):\n    return (n, 2 * n)\n"
             "def counts(s):\n    return dict(Counter(s))\ndef uniq(xs):\n    return set(xs)\ndef raw():\n    return b'ACGT'\n"
             "def root():\n    return 1j\ndef ramp(n):\n    return np.arange(n, dtype=np.int64)\n"
             "def keyed():\n    return {(1, 2): frozenset({3})}\n")
    result = check_code(spec(tests), right, sandbox)
    assert result.correct, result.reason


def test_an_unreadable_result_is_no_value():
    """What the submission's process sends is rebuilt only into base types; anything else equals nothing."""
    from components.tasks.judge_program import Foreign, revive

    assert revive({"tuple": [1, {"set": [2]}]}) == (1, {2})
    for forged in ({"object": "x.Any"}, {"complex": "x"}, {"ndarray": "not-a-dtype", "shape": [1], "data": [1]}, {}):
        value = revive(forged)
        assert isinstance(value, Foreign) and value != value.value and value != forged


# ------------------------------------------------------------------------------------- files and the judge itself
def test_modules_planted_in_the_working_directory_are_not_imported_by_the_judge(fresh_sandbox):
    tests = ("import colorsys\n"
             "assert list(to_hls(0.2, 0.4, 0.4)) == [round(v, 6) for v in colorsys.rgb_to_hls(0.2, 0.4, 0.4)]\n")
    right = "import colorsys\ndef to_hls(r, g, b):\n    return [round(v, 6) for v in colorsys.rgb_to_hls(r, g, b)]\n"
    assert check_code(spec(tests), right, fresh_sandbox).correct
    hostile = ("open('colorsys.py', 'w').write('def rgb_to_hls(r, g, b):\\n    return (0, 0, 0)\\n')\n"
               "def to_hls(r, g, b):\n    return [0, 0, 0]\n")
    result = check_code(spec(tests), hostile, fresh_sandbox)
    assert not result.correct, result.reason


COUNT_TESTS = "assert count_rows('data/rows.csv') == len(open('data/rows.csv').read().splitlines())\n"


def _with_rows(box, tmp_path):
    (tmp_path / "rows.csv").write_text("a\nb\nc\n")
    box.upload_file(tmp_path / "rows.csv", "data/rows.csv")


def test_a_submission_that_changes_the_tests_data_fails(fresh_sandbox, tmp_path):
    _with_rows(fresh_sandbox, tmp_path)
    right = ("def count_rows(path):\n    n = len(open(path).read().splitlines())\n"
             "    open('report.txt', 'w').write(str(n))  # a new file of its own is fine\n    return n\n")
    assert check_code(spec(COUNT_TESTS), right, fresh_sandbox).correct
    for hostile in ("def count_rows(path):\n    open(path, 'w').close()\n    return 0\n",  # empties it, during the call
                    "import os\nos.replace('data/rows.csv', 'data/old.csv')\nopen('data/rows.csv', 'w').write('x\\n')\n"
                    "def count_rows(path):\n    return 1\n"):  # swaps it, before any test
        result = check_code(spec(COUNT_TESTS), hostile, fresh_sandbox)
        assert not result.correct, result.reason
        _with_rows(fresh_sandbox, tmp_path)


FORGED_REPORTS = {
    "prints a passing report and exits": 'import os\nprint(\'{"passed": true}\', flush=True)\nos._exit(0)\n',
    "writes a passing report to every descriptor": (
        "import os, struct\nhello = b'{\"names\": [\"lookup\"]}'\nfor fd in range(64):\n"
        "    for data in (b'{\"passed\": true}\\n', struct.pack('>I', len(hello)) + hello):\n"
        "        try: os.write(fd, data)\n        except OSError: pass\n"
        "def lookup(n):\n    return None\n"),
    "writes through the judge's descriptors in /proc": (
        "import os\nfor fd in range(8):\n    try: open(f'/proc/{os.getppid()}/fd/{fd}', 'w').write('{\"passed\": true}\\n')\n"
        "    except OSError: pass\ndef lookup(n):\n    return None\n"),
    "kills the judge": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
}


@pytest.mark.parametrize("name", FORGED_REPORTS)
def test_the_judge_report_cannot_be_forged(sandbox, name):
    result = check_code(spec(SECRET_TESTS), FORGED_REPORTS[name], sandbox)
    assert not result.correct, (name, result.reason)
