"""bench/demo.py's parts, fast: the process-tree PSS sampler against a real child of known size, the stage table
from a pipeline state folder, and the setup steps read off this project's Makefile. The bench itself (a clone,
setup and `make demo`) is never run here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.demo import TreeSampler, read_stages, setup_steps, stage_at, stage_totals

ROOT = Path(__file__).resolve().parents[2]
MB = 1024 * 1024

# 300 MB touched page by page, then a forked child that shares those pages and touches 100 MB of its own; both
# hold on until the test writes a line, after its sampler stopped: samples taken while one of them exits could
# count the shared pages twice (the child's share read before its exit, the parent's whole after), a false peak.
# The tree's PSS is ~400 MB; its RSS summed would be ~700 MB.
HOLDER = """
import os, sys, time
def touch(n):
    buf = bytearray(n << 20)
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    return buf
a = touch(300)
r, w = os.pipe()
hold_r, hold_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(hold_w)
    b = touch(100)
    os.write(w, b"x")
    os.read(hold_r, 1)  # EOF once the parent lets go
    os._exit(0)
os.close(hold_r)
os.read(r, 1)
print("ready", flush=True)
sys.stdin.readline()
os.close(hold_w)
os.waitpid(pid, 0)
"""


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc smaps_rollup")
def test_sampler_peak_pss_of_a_forked_tree() -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    before = time.time()
    try:
        with TreeSampler(proc.pid, interval=0.1) as sampler:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(0.8)  # several samples while both hold their memory
    finally:
        proc.communicate("go\n", timeout=30)
    assert proc.returncode == 0
    assert 350 * MB <= sampler.peak <= 600 * MB, f"peak PSS {sampler.peak / MB:.0f} MB"
    assert sampler.peak_time is not None and before <= sampler.peak_time <= time.time()
    top = sampler.top_process  # the forked child: its own 100 MB and half of the 300 MB it shares with its parent
    assert top is not None and top.pid != proc.pid and "python" in top.cmdline
    assert 200 * MB <= top.bytes <= 300 * MB, f"largest process {top.bytes / MB:.0f} MB"
    assert sampler.samples >= 5


def test_stage_table_in_start_order(tmp_path: Path) -> None:
    folder = tmp_path / ".state" / "pipeline" / "smoke"
    folder.mkdir(parents=True)
    records = [("sft", "done", 1000.0, 30.0), ("suite", "done", 900.0, 50.5), ("teacher", "done", 951.0, 40.0),
               ("dpo", "running", 1031.0, None)]
    for stage, status, started, wall in records:
        (folder / f"{stage}.json").write_text(json.dumps(
            {"stage": stage, "key": "k", "status": status, "started_at": started, "wall_s": wall, "result": {}}))
    (folder / "_run.json").write_text(json.dumps({"run_id": "r", "status": "running", "params": ""}))

    stages = read_stages(folder)
    assert [s["stage"] for s in stages] == ["suite", "teacher", "sft", "dpo"]
    assert stages[-1] == {"stage": "dpo", "status": "running", "started_at": 1031.0, "wall_s": None}
    assert stage_totals(stages) == {"sum_s": 120.5, "span_s": 130.0}  # 900 to 1030; the running one has no end
    assert stage_at(stages, 960.0) == "teacher" and stage_at(stages, 950.7) is None
    assert read_stages(tmp_path / "absent") == [] and stage_totals([]) == {"sum_s": None, "span_s": None}


def test_setup_steps_from_this_makefile() -> None:
    steps, prereqs = setup_steps(ROOT / "Makefile", "demo")
    # `environments` is phony with a recipe of its own (both environments, side by side): it runs as itself
    assert steps == prereqs == ["environments"]
    steps, prereqs = setup_steps(ROOT / "Makefile", "diag-demo")
    assert steps == ["setup"] and prereqs == [".venv/.installed"]  # the stamp is what `make setup` stands for


def test_setup_steps_expand_variables_and_keep_phony_prerequisites(tmp_path: Path) -> None:
    makefile = tmp_path / "Makefile"
    makefile.write_text("D := out\nSTAMP = $(D)/.done  # a comment\n.PHONY: all data setup\n"
                        "$(STAMP): x\n\ttouch $@\nsetup: $(STAMP)\ndata:\n\techo\n"
                        "all: $(STAMP) data | $(D)/log\n\techo\n")
    assert setup_steps(makefile, "all") == (["setup", "data", "out/log"], ["out/.done", "data", "out/log"])
