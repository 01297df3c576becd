"""Structured error feedback from real failing runs in the process sandbox."""

from __future__ import annotations

from components.envs.actions import RunCode
from components.envs.feedback import RULES, ErrorInfo, rule_for
from tests.envs.conftest import make_task


def run_failing(make_env, code: str, **config):
    env = make_env(max_turns=5, **config)
    env.reset(make_task())
    res = env.step(RunCode(code=code))
    return res, env.episode.turns[-1]


def test_keyerror_on_dataframe_names_its_columns(make_env):
    code = (
        "import pandas as pd\ndf = pd.read_csv('data/patients.csv')\nn = len(df)\nprint(df['gender'].value_counts())\n"
    )
    res, turn = run_failing(make_env, code)
    assert turn.error.kind == "KeyError" and turn.error.line == 4
    text = res.observation.text
    assert "DataFrame `df` has columns: ['patient_id', 'age', 'sex', 'sodium']" in text
    # the failing line with two lines of context, marked
    assert "> 4 | print(df['gender'].value_counts())" in text and "  2 | df = pd.read_csv" in text
    assert "What to check:" in text and "spelling" in text


def test_keyerror_inside_a_function_finds_the_local_dataframe(make_env):
    code = (
        "import pandas as pd\n"
        "def mean_of(col):\n"
        "    frame = pd.read_csv('data/patients.csv')\n"
        "    return frame[col].mean()\n"
        "print(mean_of('Age'))\n"
    )
    res, turn = run_failing(make_env, code)
    assert turn.error.line == 4
    assert (
        "DataFrame `frame` has columns" in res.observation.text and "closest to 'Age': ['age']" in res.observation.text
    )


def test_sqlite_no_such_column_lists_the_tables_columns(make_env):
    code = (
        "import sqlite3\n"
        "con = sqlite3.connect('data/pharmacy.db')\n"
        'rows = con.execute("SELECT drug_name FROM prescriptions WHERE subject_id = 3").fetchall()\n'
        "print(rows)\n"
    )
    res, turn = run_failing(make_env, code)
    assert turn.error.kind == "sqlite3.OperationalError" and "no such column: drug_name" in turn.error.message
    text = res.observation.text
    assert "Table `prescriptions` in data/pharmacy.db has columns: ['subject_id', 'drug', 'dose_val_rx']" in text
    assert "closest to 'drug_name': ['drug']" in text
    assert "Table `patients`" not in text  # only the table the query names
    assert "> 3 | rows = con.execute" in text


def test_sqlite_no_such_table_through_pandas_lists_tables(make_env):
    code = (
        "import sqlite3, pandas as pd\n"
        "con = sqlite3.connect('data/pharmacy.db')\n"
        "print(pd.read_sql('SELECT * FROM prescription', con))\n"
    )
    res, turn = run_failing(make_env, code)
    assert "no such table" in turn.error.message
    assert "data/pharmacy.db has tables: ['patients', 'prescriptions']" in res.observation.text


def test_syntax_error_points_at_the_line(make_env):
    res, turn = run_failing(make_env, "x = 1\ny = 2\nif x > y\n    print(x)\n")
    assert turn.error.kind == "SyntaxError" and turn.error.line == 3
    assert "> 3 | if x > y" in res.observation.text and "not valid Python" in res.observation.text


def test_file_not_found_lists_the_files(make_env):
    res, turn = run_failing(make_env, "import pandas as pd\npd.read_csv('patients.csv')\n")
    assert turn.error.kind == "FileNotFoundError"
    assert "data/patients.csv" in res.observation.text and "data/pharmacy.db" in res.observation.text


def test_common_errors_get_their_own_explanations(make_env):
    cases = {
        "print(10 / (3 - 3))": ("ZeroDivisionError", "denominator"),
        "import sklearn_not_here": ("ModuleNotFoundError", "cannot be installed"),
        "print([][0])": ("IndexError", "empty result"),
        "int('12 mg')": ("ValueError", "pd.to_numeric"),
        "print(None.upper())": ("AttributeError", "is None"),
    }
    env = make_env(max_turns=len(cases) + 1, loop_window=10)
    env.reset(make_task())
    for code, (kind, hint) in cases.items():
        res = env.step(RunCode(code=code))
        assert env.episode.turns[-1].error.kind == kind, code
        assert hint in res.observation.text, code
    assert sum(env.episode.error_kinds.values()) == len(cases)


def test_memory_error_is_explained(make_env):
    res, turn = run_failing(make_env, "x = bytearray(4 * 1024 ** 3)\n")
    assert turn.error.kind == "MemoryError"
    assert "memory" in res.observation.text.lower() and "usecols" in res.observation.text


def test_rule_table_covers_the_common_kinds():
    kinds = [
        "KeyError",
        "sqlite3.OperationalError",
        "SyntaxError",
        "FileNotFoundError",
        "ZeroDivisionError",
        "ModuleNotFoundError",
        "TimeoutError",
        "MemoryError",
        "NameError",
        "TypeError",
        "IndexError",
        "AttributeError",
        "ValueError",
        "UnicodeDecodeError",
        "pandas.errors.ParserError",
    ]
    fallback = rule_for(ErrorInfo(kind="WeirdError", message="?"))
    for kind in kinds:
        assert rule_for(ErrorInfo(kind=kind, message="x")) is not fallback, kind
    assert len(RULES) >= 15
    col = rule_for(ErrorInfo(kind="pandas.errors.DatabaseError", message="Execution failed: no such column: x"))
    assert "column" in col.meaning


def test_long_multiline_sql_error_keeps_the_cause(make_env):
    select = ",\n".join(f"    subject_id AS s{i}" for i in range(40))
    code = (
        "import sqlite3, pandas as pd\n"
        "con = sqlite3.connect('data/pharmacy.db')\n"
        f"q = '''SELECT\n{select},\n    drugname\nFROM prescriptions'''\n"
        "print(pd.read_sql(q, con))\n"
    )
    res, turn = run_failing(make_env, code)
    assert turn.error.message.endswith("no such column: drugname")
    assert "closest to 'drugname': ['drug']" in res.observation.text
