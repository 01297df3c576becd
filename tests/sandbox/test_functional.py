"""What every backend must do for ordinary code: both modes, uploads, the scientific stack."""

from __future__ import annotations

import pytest

from components.sandbox.protocol import Limits, Sandbox

pytestmark = pytest.mark.timeout(60)


def test_satisfies_protocol(make_sandbox):
    assert isinstance(make_sandbox(), Sandbox)


def test_stateful_keeps_variables(make_sandbox):
    sb = make_sandbox(stateful=True)
    assert sb.exec("x = 41").status == "ok"
    res = sb.exec("x += 1\nprint(x)")
    assert res.status == "ok" and res.stdout == "42\n"


def test_stateless_forgets_variables(make_sandbox):
    sb = make_sandbox(stateful=False)
    assert sb.exec("x = 41").status == "ok"
    res = sb.exec("print(x)")
    assert res.status == "error" and res.exit_code == 1
    assert "NameError" in res.stderr


def test_stateless_forgets_files_in_tmp_but_keeps_workdir(make_sandbox):
    sb = make_sandbox()
    sb.exec("open('kept.txt', 'w').write('in workdir')")
    assert sb.exec("print(open('kept.txt').read())").stdout == "in workdir\n"


def test_upload_file_visible_at_cwd(make_sandbox, tmp_path):
    src = tmp_path / "data.csv"
    src.write_text("a,b\n1,2\n3,4\n")
    sb = make_sandbox()
    sb.upload_file(src, "data.csv")
    sb.upload_file(src, "sub/dir/copy.csv")
    res = sb.exec("import pandas as pd\nprint(pd.read_csv('data.csv').b.sum(), open('sub/dir/copy.csv').read()[:3])")
    assert res.status == "ok", res
    assert res.stdout == "6 a,b\n"


def test_upload_dir_visible_at_cwd(make_sandbox, tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "helper.py").write_text("VALUE = 7\n")
    (tmp_path / "pkg" / "notes.txt").write_text("hello")
    sb = make_sandbox()
    sb.upload_dir(tmp_path / "pkg", "lib")
    res = sb.exec(
        "import sys\nsys.path.insert(0, 'lib')\nimport helper\nprint(helper.VALUE, open('lib/notes.txt').read())"
    )
    assert res.status == "ok", res
    assert res.stdout == "7 hello\n"


def test_pandas_groupby(make_sandbox):
    res = make_sandbox().exec(
        "import numpy as np, pandas as pd\n"
        "df = pd.DataFrame({'g': np.arange(1000) % 3, 'v': np.arange(1000)})\n"
        "print(df.groupby('g').v.mean().round(1).tolist())\n"
    )
    assert res.status == "ok", res
    assert res.stdout == "[499.5, 499.0, 500.0]\n"


def test_exit_codes_and_stderr(make_sandbox):
    sb = make_sandbox()
    res = sb.exec("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(4)")
    assert (res.status, res.exit_code, res.stdout, res.stderr) == ("error", 4, "out\n", "err\n")
    res = sb.exec("raise ValueError('boom')")
    assert res.status == "error" and res.exit_code == 1
    assert "ValueError: boom" in res.stderr and res.truncated is False


def test_per_call_timeout_overrides_limits(make_sandbox):
    sb = make_sandbox(Limits(timeout_s=30))
    res = sb.exec("import time\ntime.sleep(30)", timeout_s=0.5)
    assert res.status == "timeout" and res.duration_s < 2.5


def test_stateful_timeout_resets_state_and_says_so(make_sandbox):
    sb = make_sandbox(Limits(timeout_s=5), stateful=True)
    sb.exec("x = 1")
    assert sb.exec("while True: pass", timeout_s=0.5).status == "timeout"
    res = sb.exec("print('x' in globals())")
    assert res.status == "ok" and res.stdout == "False\n"
    assert "state was reset" in res.stderr


def test_close_is_idempotent_and_is_alive_never_raises(make_sandbox):
    sb = make_sandbox()
    assert sb.is_alive() is True
    sb.close()
    sb.close()
    assert sb.is_alive() is False


def test_output_printed_before_a_timeout_is_kept(make_sandbox):
    box = make_sandbox()
    res = box.exec("print('before the spin', flush=False)\nwhile True:\n    pass\n", timeout_s=1.0)
    assert res.status == "timeout"
    assert "before the spin" in res.stdout


def test_set_order_is_the_same_in_every_sandbox(make_sandbox):
    """One string-hash seed everywhere: an expected output that follows a set's order is reproduced in any sandbox
    (every process sandbox is a fork of one interpreter, so they would share a seed anyway; docker's agree)."""
    import subprocess
    import sys

    code = "print(hash('medgym'), list({str(i) for i in range(20)}))"
    want = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={"PYTHONHASHSEED": "0"}).stdout
    outs = {make_sandbox().exec(code).stdout for _ in range(2)}
    assert outs == {want}
