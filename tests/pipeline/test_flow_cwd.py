"""A flow run started in another folder (a Prefect process worker starts each in a temporary one) works on the project
root: the profile's relative paths are the root's."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_a_pipeline_flow_run_started_elsewhere_reads_the_profiles_relative_paths_at_the_project_root(tmp_path):
    code = ("import json, os\nfrom flows.pipeline import pipeline_flow\n"
            "out = pipeline_flow.fn(profile='configs/smoke.yaml', dry_run=True)\n"
            "print(json.dumps({'cwd': os.getcwd(), 'profile': out['profile']}))")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out == {"cwd": str(ROOT), "profile": "smoke"}
    assert list(tmp_path.iterdir()) == [] or all(p.name.startswith(".") for p in tmp_path.iterdir())
