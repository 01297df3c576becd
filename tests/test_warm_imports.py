"""infra/warm_imports.py: it names modules that import (a renamed one would silently stop being compiled at setup,
and its compile would land back on every process start), it writes bytecode where PYTHONDONTWRITEBYTECODE keeps
Python from writing any, and a required module that does not import fails setup."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, load_script

SCRIPT = ROOT / "infra" / "warm_imports.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def test_every_module_setup_warms_imports():
    out = _run()
    assert out.returncode == 0, out.stderr
    done, total = map(int, re.search(r"(\d+) of (\d+) imported", out.stderr).groups())
    assert done == total > 10, out.stderr


def test_only_a_required_module_that_does_not_import_fails():
    assert _run("json", "medgym_no_such_module").returncode == 0
    failed = _run("--require", "json", "--require", "medgym_no_such_module")
    assert failed.returncode == 1 and "medgym_no_such_module: ModuleNotFoundError" in failed.stderr


def test_bytecode_is_written_for_loaded_modules_under_the_prefix_only(tmp_path: Path, monkeypatch):
    warm = load_script(SCRIPT)
    inside, outside = tmp_path / "env", tmp_path / "tree"
    for folder, name in ((inside, "medgym_warm_probe_in"), (outside, "medgym_warm_probe_out")):
        folder.mkdir()
        (folder / f"{name}.py").write_text("X = 1\n")
        monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as PYTHONDONTWRITEBYTECODE=1 sets it
    import medgym_warm_probe_in  # noqa: F401
    import medgym_warm_probe_out  # noqa: F401

    probe = inside / "medgym_warm_probe_in.py"
    assert not Path(importlib.util.cache_from_source(str(probe))).exists()  # the import kept none
    written, _ = warm.compile_loaded(inside)
    assert written == 1 and Path(importlib.util.cache_from_source(str(probe))).is_file()
    assert not Path(importlib.util.cache_from_source(str(outside / "medgym_warm_probe_out.py"))).exists()
    for name in ("medgym_warm_probe_in", "medgym_warm_probe_out"):
        sys.modules.pop(name)
