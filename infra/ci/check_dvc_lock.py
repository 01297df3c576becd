"""CI check: is dvc.lock up to date with dvc.yaml, the stages' dependencies, parameters and commands?

    .venv/bin/python infra/ci/check_dvc_lock.py [--repo PATH]

Exits 1 naming each stale stage when `dvc status --json` reports a changed dependency, a changed parameter or a
changed command, when a stage of dvc.yaml has no entry in its dvc.lock, or when dvc.lock keeps a stage that dvc.yaml
no longer defines. A clean clone has no data, so outputs that are merely absent are tolerated: an output that is
"deleted" or "not in cache", and a dependency that is "deleted" where it is (inside) an output of a stage or of a
.dvc file. Such a dependency is then checked in the lock itself: the hash dvc.lock records for it must equal the
hash recorded for that output (a stage reproduced without its downstream stages shows up even without data).
"always changed" stages are not stale. Exits 2 when dvc itself fails (an invalid dvc.yaml, say).

What `dvc status --json` prints (DVC 3.x), per stage address ("stage", or "sub/dvc.yaml:stage"):
    {"s": ["changed command"]}
    {"s": [{"changed deps": {"src": "modified", "params.yaml": {"lr": "modified"}}}]}
    {"s": [{"changed outs": {"out": "deleted"}}]}          # "not in cache" once the cache is gone too
    {"s": ["always changed"]}
A stage missing from dvc.lock shows only its outputs as "deleted" (or its deps as "modified"), which is why the
lock's stage names are compared with dvc.yaml's here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ABSENT_OUT = {"deleted", "not in cache"}
TOLERATED = {"always changed"}


def _dvc_status(repo: Path) -> dict:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    proc = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=repo, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        print(f"check_dvc_lock: `dvc status --json` failed (exit {proc.returncode}) in {repo}", file=sys.stderr)
        raise SystemExit(2)
    out = proc.stdout.strip()
    return json.loads(out) if out else {}


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _hash(info) -> tuple | None:
    return (info.name, info.value) if info and info.value else None


def check(repo: Path) -> tuple[list[str], dict[str, list[str]], int]:
    """(notes on tolerated absences, problems by stage address, number of pipeline stages)."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    repo = repo.resolve()
    os.chdir(repo)  # dvc status and the index name stages and paths relative to the working directory
    status = _dvc_status(repo)
    problems: dict[str, list[str]] = {}
    notes: list[str] = []
    with Repo(str(repo)) as dvc_repo:
        stages = list(dvc_repo.index.stages)
    pipeline = [s for s in stages if isinstance(s, PipelineStage)]
    by_address = {s.addressing: s for s in pipeline}
    outs = {o.fs_path: (s.addressing, o) for s in stages for o in s.outs}  # stage and .dvc-file outputs

    reported: set[tuple[str, str]] = set()  # (stage, dependency) pairs dvc status already spoke of
    unlocked: set[str] = set()  # stages with no lock entry: every dep and out of theirs reads as changed

    def add(address: str, msg: str) -> None:
        problems.setdefault(address, []).append(msg)

    # the lock's stage names against dvc.yaml's, per dvc.yaml (and the root dvc.lock even if dvc.yaml lost its stages)
    yamls = {Path(s.path) for s in pipeline} | ({repo / "dvc.yaml"} if (repo / "dvc.lock").is_file() else set())
    for yaml_path in sorted(yamls):
        lock_path = yaml_path.with_suffix(".lock")
        rel_yaml, rel = os.path.relpath(yaml_path, repo), os.path.relpath(lock_path, repo)
        defined = {s.name: s for s in pipeline if Path(s.path) == yaml_path}
        locked = _lock_stages(lock_path)
        for name, st in defined.items():
            if name not in locked:
                unlocked.add(st.addressing)
                add(st.addressing, f"not in {rel}: run `dvc repro {st.addressing}` and commit {rel}")
        for name in sorted(set(locked) - set(defined)):
            prefix = "" if yaml_path.parent == repo else f"{rel_yaml}:"
            add(prefix + name, f"in {rel} but no longer in {rel_yaml}: delete its entry from {rel}")

    # what dvc status reports
    for address, entries in status.items():
        st = by_address.get(address)
        if st is None or address in unlocked:  # a .dvc file (its data is not dvc.lock's business), or said already
            continue
        for entry in entries:
            if isinstance(entry, str):
                if entry not in TOLERATED:
                    add(address, entry)
                continue
            for kind, changes in entry.items():
                for path, change in changes.items():
                    full = os.path.normpath(os.path.join(repo, path))
                    if kind == "changed outs" and change in ABSENT_OUT:
                        notes.append(f"{address}: output {path} is {change}")
                    elif kind == "changed deps" and change == "deleted" and _producer(full, outs):
                        notes.append(f"{address}: dependency {path} (an output of {_producer(full, outs)}) is absent")
                    elif isinstance(change, dict):  # parameters
                        what = ", ".join(f"{k} {v}" for k, v in change.items())
                        add(address, f"changed params in {path}: {what}")
                    else:
                        noun = {"changed deps": "dependency", "changed outs": "output"}.get(kind, kind)
                        add(address, f"{noun} {path} {change}")
                        reported.add((address, full))

    # absent data cannot be hashed: compare each dependency's locked hash with its producer's locked hash
    for st in pipeline:
        for dep in st.deps:
            producer = outs.get(dep.fs_path)
            if producer is None or producer[0] == st.addressing or isinstance(dep, ParamsDependency):
                continue
            if (st.addressing, os.path.normpath(dep.fs_path)) in reported:
                continue
            want, have = _hash(producer[1].hash_info), _hash(dep.hash_info)
            if want and have and want != have:
                add(st.addressing, f"dependency {dep.def_path} is locked at {have[0]} {have[1]}, but {producer[0]} "
                                   f"produced {want[0]} {want[1]}: run `dvc repro {st.addressing}`")
    return notes, problems, len(pipeline)


def _producer(path: str, outs: dict) -> str | None:
    for out_path, (address, _) in outs.items():
        if _inside(path, out_path):
            return address
    return None


def _lock_stages(lock_path: Path) -> dict:
    if not lock_path.is_file():
        return {}
    data = yaml.safe_load(lock_path.read_text()) or {}
    return data.get("stages") or {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=ROOT, help="the DVC project (default: this repository)")
    args = ap.parse_args(argv)
    notes, problems, n = check(args.repo)
    if problems:
        print(f"dvc.lock is out of date in {len(problems)} stage(s):")
        for address in sorted(problems):
            print(f"  stage {address}:")
            for msg in problems[address]:
                print(f"    - {msg}")
        print("Reproduce them (`dvc repro`, or `dvc commit <stage>` where the outputs are already right) and commit "
              "dvc.lock.")
        return 1
    absent = f"; {len(notes)} absent output(s) or data dependencies tolerated (data not pulled)" if notes else ""
    print(f"dvc.lock is up to date: {n} stage(s) checked{absent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
