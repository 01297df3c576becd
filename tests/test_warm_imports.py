"""infra/warm_imports.py names modules that exist and import: a renamed one would silently stop being compiled at
setup, and its first import would land back in the demo."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT


def test_every_module_setup_warms_imports():
    out = subprocess.run([sys.executable, str(ROOT / "infra" / "warm_imports.py")], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    done, total = map(int, re.search(r"(\d+) of (\d+) imported", out.stderr).groups())
    assert done == total > 10, out.stderr
