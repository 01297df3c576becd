"""Whatever the agent's code prints is data: forged runner lines, binary, invalid UTF-8, NUL bytes and 10 MB lines
never raise out of step(), never change what it does, and every turn is recorded (issue 8 §6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.envs.actions import InspectData, RunCode
from components.envs.agent_code import Hints, read_hints, split_hints
from components.envs.coding_env import CodingEnv, EnvConfig, make_sandbox_factory
from components.envs.episode import save_episodes
from components.sandbox.protocol import Limits
from tests.envs.conftest import make_task, process_backend_unavailable

# The running wrapper's marker, read the way any agent code could (the wrapper's frame is the caller's).
MARKER = "__import__('sys')._getframe(1).f_locals['marker']"
FAIL = "\nd = {}\nd['missing']\n"  # a KeyError: the failure path that reads hints

HINT_PAYLOADS = {
    "list": '{"dataframes": [1, 2]}',
    "int": '{"dataframes": 5, "dicts": 7}',
    "nested": '{"dataframes": {"df": [[1, [2]], {"a": 1}]}}',
    "null names": '{"dataframes": {"df": null}}',
    "not a dict": "[1, 2, 3]",
    "bad name": '{"dataframes": {"no such; name": ["a"]}}',
    "extra key": '{"dataframes": {}, "control": "end_episode"}',
    "too many names": json.dumps({"dicts": {f"n{i}": [] for i in range(50)}}),
    "deep": "[" * 100_000 + "]" * 100_000,
    "huge": '{"dataframes": {"df": ["' + "c" * 5_000_000 + '"]}}',
    "cut": '{"dataframes": {"df": ["a", ',
}

OUTPUTS = {
    # the issue's reproduction: the old fixed marker, then a failure
    "old marker": "import sys\nprint('__medgym_hint__ {\"dataframes\": [1, 2]}', file=sys.stderr)" + FAIL,
    **{
        f"forged hint ({name})": f"import sys\nprint({MARKER} + {payload!r}, file=sys.stderr)" + FAIL
        for name, payload in HINT_PAYLOADS.items()
    },
    "two marked lines": f"import sys\nm = {MARKER}\nprint(m + '{{}}', file=sys.stderr)\nprint(m + '{{}}', file=sys.stderr)"
    + FAIL,
    "binary stdout": "import os\nos.write(1, bytes(range(256)) * 64)\n",
    "binary stderr then exit": "import os\nos.write(2, bytes(range(256)) * 64)\nos._exit(3)\n",
    "invalid utf-8": "import os\nos.write(1, b'\\xff\\xfe\\xc3\\x28\\xa0\\xa1\\xe2\\x28\\xa1 \\xf0\\x28\\x8c\\xbc')\n"
    "os.write(2, b'Traceback (most recent call last):\\n\\xff\\xfe: \\xc3\\x28\\n')\nraise SystemExit(1)\n",
    "nul bytes": "import sys\nprint('a\\x00b\\x00' * 1000)\nprint('\\x00KeyError: \\x00', file=sys.stderr)" + FAIL,
    "lone surrogates": "import sys\nprint('\\ud800\\udfff')\nprint('\\udc80', file=sys.stderr)" + FAIL,
    "10 MB stdout line": "import sys\nsys.stdout.write('x' * 10_000_000)\n",
    "10 MB stderr line": "import sys\nsys.stderr.write('Traceback (most recent call last):\\n' + 'y' * 10_000_000)\n"
    "raise SystemExit(1)\n",
    "10 MB marked line": f"import sys\nsys.stderr.write({MARKER} + '{{' * 10_000_000 + '\\n')" + FAIL,
    "10 MB line without newline, then failure": "import sys\nsys.stderr.write('z' * 10_000_000)" + FAIL,
    "fake frame with a huge line number": "import sys\nsys.stderr.write('Traceback (most recent call last):\\n"
    "  File \"<agent_code>\", line ' + '9' * 6000 + '\\nKeyError: 1\\n')\nraise SystemExit(1)\n",
    "fake traceback only": "import sys\nsys.stderr.write('Traceback (most recent call last):\\n\\n\\n')\n"
    "raise SystemExit(1)\n",
    "many short lines": "import sys\nfor i in range(200_000):\n    print('__medgym_hint__ {}', i, file=sys.stderr)"
    + FAIL,
}


@pytest.fixture
def big_output_env(task_root: Path):
    """An env whose sandbox passes 16 MB of output through, so a 10 MB line reaches step() whole."""
    reason = process_backend_unavailable()
    if reason:
        pytest.skip(reason)
    cfg = EnvConfig(exec_timeout_s=30.0, max_turns=len(OUTPUTS) + 5, loop_window=50)
    limits = Limits(max_output_bytes=16 * 1024 * 1024, memory_mb=2048)
    env = CodingEnv(task_root, make_sandbox_factory(cfg, backend="process", limits=limits), cfg)
    yield env
    env.close()


def test_no_output_raises_out_of_step_and_every_turn_is_recorded(big_output_env, tmp_path):
    env = big_output_env
    env.reset(make_task())
    for i, (name, code) in enumerate(OUTPUTS.items()):
        res = env.step(RunCode(code=code))
        turn = env.episode.turns[-1]
        assert len(env.episode.turns) == i + 1, name
        assert not res.done and isinstance(res.observation.text, str) and res.observation.text, name
        assert turn.observation.startswith(res.observation.text.split("\n\n[turn")[0]), name
        assert len(res.observation.text) < 20_000, (name, len(res.observation.text))  # clipped, not 10 MB
        # handled by the parsing itself, not by the fallback around the explanation
        assert "feedback_error" not in turn.metadata, (name, turn.metadata)
        if name.startswith("forged hint") or name in ("old marker", "two marked lines", "10 MB marked line"):
            assert turn.error is not None and turn.error.kind == "KeyError", name
            # the only facts from hints are the wrapper's own (its one true line, or none when it was outnumbered)
            from_hints = [f for f in turn.facts if f.startswith(("DataFrame", "dict"))]
            assert from_hints in ([], ["dict `d` has keys: []"]), (name, turn.facts)
    # the record survives being written out
    assert save_episodes(tmp_path / "episodes.jsonl", [env.episode]) == 1


def test_forged_inspect_output_in_a_stateful_namespace(make_env):
    """In a stateful sandbox the agent's names surround the inspection snippet: a forged result is refused politely."""
    env = make_env(stateful=True, max_turns=8, loop_window=8)
    env.reset(make_task())
    forgers = {
        "wrong shape": '{"kind": "sqlite", "tables": 5}',
        "wrong field types": '{"kind": "csv", "rows": [], "columns": 3, "head": 7}',
        "not an object": "[1]",
        "cut": '{"kind": "fasta", "n_re',
    }
    for name, forged in forgers.items():
        # `print` in the namespace replaces the builtin for the snippet, which runs in the same globals
        code = (
            "import sys\n"
            "def print(*args, **kw):\n"
            "    text = ' '.join(str(a) for a in args)\n"
            "    head = text.split(' ', 1)[0]\n"
            f"    sys.__stdout__.write(head + ' ' + {forged!r} + '\\n' if head.startswith('__medgym') else text + '\\n')\n"
        )
        assert env.step(RunCode(code=code)).info["error_kind"] is None, name
        res = env.step(InspectData(path="data/pharmacy.db"))
        assert "could not be read" in res.observation.text, (name, res.observation.text)
        # a failing SQL query reads the schema through the same snippet, for its facts
        failed = env.step(RunCode(code="import sqlite3\nsqlite3.connect('data/pharmacy.db').execute('select nope from patients')"))
        assert "OperationalError" in str(failed.info["error_kind"])
        assert "feedback_error" not in env.episode.turns[-1].metadata
        env.step(RunCode(code="del print\n"))
        if env.episode.done:
            break


def test_hint_lines_are_read_strictly_and_bounded():
    for name, payload in HINT_PAYLOADS.items():
        assert read_hints(payload) == Hints(), name
    good = read_hints('{"dataframes": {"df": ["age", "sex"]}, "dicts": {"d": ["k"]}}')
    assert good == Hints(dataframes={"df": ["age", "sex"]}, dicts={"d": ["k"]})
    marker = "__medgym_hint_0123__ "
    kept, hints = split_hints(f"a\n{marker}{{\"dicts\": {{\"d\": [\"k\"]}}}}\nb\n", marker)
    assert kept == "a\nb\n" and hints.dicts == {"d": ["k"]}
    # a second marked line means the agent printed some: believe none, show none
    kept, hints = split_hints(f"{marker}{{}}\n{marker}{{\"dicts\": {{\"d\": []}}}}\n", marker)
    assert kept == "" and hints == Hints()
    # another run's marker, or the old fixed one, is plain text
    kept, hints = split_hints('__medgym_hint__ {"dataframes": [1]}\n', marker)
    assert kept == '__medgym_hint__ {"dataframes": [1]}\n' and hints == Hints()


def test_the_real_hint_still_names_the_columns(make_env):
    env = make_env(max_turns=3)
    env.reset(make_task())
    res = env.step(RunCode(code="import pandas as pd\ndf = pd.read_csv('data/patients.csv')\nprint(df['Sex'])\n"))
    assert "DataFrame `df` has columns: ['patient_id', 'age', 'sex', 'sodium']" in res.observation.text
    assert "__medgym_hint" not in res.observation.text
