"""DVC as the project uses it, on throwaway projects (git init + dvc init in tmp_path), with the real dvc CLI: the
project's default remote, a push/pull round trip through a local remote, a parameter sweep with `dvc exp run -S`,
and the CI lock check (infra/ci/check_dvc_lock.py). DVC's global, system and site config stay in tmp_path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "infra" / "ci" / "check_dvc_lock.py"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No analytics; DVC's and git's user-level config in tmp_path, never in the user's home."""
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n\tname = MedGym Tests\n\temail = tests@medgym.invalid\n[init]\n\tdefaultBranch = main\n")
    return {**os.environ, "DVC_NO_ANALYTICS": "1", "DVC_GLOBAL_CONFIG_DIR": str(tmp_path / "dvc-global"),
            "DVC_SYSTEM_CONFIG_DIR": str(tmp_path / "dvc-system"), "DVC_SITE_CACHE_DIR": str(tmp_path / "dvc-site"),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(gitconfig)}


def _run(args: list[str], cwd: Path, env: dict[str, str], ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if ok and proc.returncode != 0:
        raise AssertionError(f"{args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def dvc(project: Path, env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "dvc", *args], project, env, ok)


def git(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return _run(["git", *args], project, env)


@pytest.fixture
def project(tmp_path: Path, env: dict[str, str]) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    git(root, env, "init", "-q")
    dvc(root, env, "init", "-q")
    dvc(root, env, "config", "core.autostage", "true")
    return root


def _commit(project: Path, env: dict[str, str], msg: str) -> None:
    git(project, env, "add", "-A")
    git(project, env, "commit", "-q", "-m", msg)


def _stage_file(project: Path, stages: dict) -> None:
    (project / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))


def _py(code: str) -> str:
    """A stage command: this interpreter (it has PyYAML) running a one-liner."""
    return f'{sys.executable} -c "{code}"'


def test_project_default_remote_is_local_and_ignored(env: dict[str, str]) -> None:
    """.dvc/config names a default remote, a folder inside the project that git ignores."""
    default = dvc(ROOT, env, "remote", "default", "--project").stdout.strip()
    assert default == "local"
    listed = dict(line.split()[:2] for line in dvc(ROOT, env, "remote", "list", "--project").stdout.splitlines())
    url = Path(listed[default])
    assert url.is_absolute() and url.is_relative_to(ROOT), url
    ignored = subprocess.run(["git", "check-ignore", "-q", str(url.relative_to(ROOT) / "files")], cwd=ROOT)
    assert ignored.returncode == 0, f"{url} is not gitignored"


@pytest.mark.slow
def test_push_pull_round_trip(project: Path, env: dict[str, str]) -> None:
    dvc(project, env, "remote", "add", "-d", "local", ".dvc/remote")  # relative, as in the project's .dvc/config
    data = project / "data"
    (data / "nested").mkdir(parents=True)
    (data / "tasks.jsonl").write_text('{"id": "t1"}\n{"id": "t2"}\n')
    (data / "nested" / "blob.bin").write_bytes(bytes(range(256)) * 64)
    before = {p.relative_to(data): p.read_bytes() for p in data.rglob("*") if p.is_file()}
    dvc(project, env, "add", "data")
    _commit(project, env, "track data")
    dvc(project, env, "push")
    assert any((project / ".dvc" / "remote").rglob("*")), "the push wrote nothing to the remote"

    shutil.rmtree(data)
    shutil.rmtree(project / ".dvc" / "cache")
    dvc(project, env, "pull")
    after = {p.relative_to(data): p.read_bytes() for p in data.rglob("*") if p.is_file()}
    assert after == before


@pytest.mark.slow
def test_exp_run_sweeps_a_param(project: Path, env: dict[str, str]) -> None:
    (project / "params.yaml").write_text("train:\n  lr: 1\n")
    code = ("import json, yaml; lr = yaml.safe_load(open('params.yaml'))['train']['lr']; "
            "open('model.txt', 'w').write(str(10 * lr)); json.dump({'score': 10 * lr}, open('metrics.json', 'w'))")
    _stage_file(project, {"train": {"cmd": _py(code), "params": ["train.lr"], "outs": ["model.txt"],
                                    "metrics": [{"metrics.json": {"cache": False}}]}})
    _commit(project, env, "baseline")
    for lr in (2, 5):
        dvc(project, env, "exp", "run", "-n", f"lr-{lr}", "-S", f"params.yaml:train.lr={lr}")

    shown = json.loads(dvc(project, env, "exp", "show", "--json").stdout)
    baseline = next(row for row in shown if row["rev"] != "workspace")
    runs = {rev["name"]: rev["data"] for exp in baseline["experiments"] for rev in exp["revs"]}
    assert set(runs) == {"lr-2", "lr-5"}
    for lr in (2, 5):
        data = runs[f"lr-{lr}"]
        assert data["params"]["params.yaml"]["data"] == {"train": {"lr": lr}}
        assert data["metrics"]["metrics.json"]["data"] == {"score": 10 * lr}
    assert baseline["data"]["params"]["params.yaml"]["data"] == {"train": {"lr": 1}}  # the commit is untouched


@pytest.mark.slow
def test_exp_run_beside_the_checked_in_pipelines(project: Path, env: dict[str, str]) -> None:
    """A clone that has never run a profile still holds its checked-in dvc.yaml and lock. DVC reads every
    pipeline's top-level plots when it saves an experiment, and a plot inside a folder out whose listing is not in
    the cache fails the whole `dvc exp run`: the project's plots read file outs of their own (figures.py)."""
    for name in ("dvc.yaml", "dvc.lock", "pipelines/diag-demo/dvc.yaml", "pipelines/diag-demo/dvc.lock",
                 "pipelines/demo-rl/dvc.yaml", "pipelines/demo-rl/dvc.lock"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, project / name)
    (project / "toy").mkdir()
    (project / "toy" / "params.yaml").write_text("train:\n  lr: 1\n")
    code = ("import json, yaml; lr = yaml.safe_load(open('params.yaml'))['train']['lr']; "
            "json.dump({'score': 10 * lr}, open('metrics.json', 'w'))")
    (project / "toy" / "dvc.yaml").write_text(yaml.safe_dump(
        {"stages": {"train": {"cmd": _py(code), "params": ["train.lr"], "metrics": ["metrics.json"]}}}))
    _commit(project, env, "the checked-in pipelines, never run here, and a toy one")
    dvc(project, env, "exp", "run", "-n", "lr-2", "-S", "toy/params.yaml:train.lr=2", "toy/dvc.yaml")

    shown = json.loads(dvc(project, env, "exp", "show", "--json").stdout)
    baseline = next(row for row in shown if row["rev"] != "workspace")
    runs = {rev["name"]: rev["data"] for exp in baseline["experiments"] for rev in exp["revs"]}
    assert runs["lr-2"]["metrics"]["toy/metrics.json"]["data"] == {"score": 20}
    dvc(project, env, "plots", "show", "-o", str(project.parent / "plots"))  # every pipeline's plots, none there


def _check(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return _run([sys.executable, str(CHECK), "--repo", str(project)], project, env, ok=False)


@pytest.mark.slow
def test_lock_check(project: Path, env: dict[str, str]) -> None:
    """Up to date after `dvc repro`; a changed dep, param or command (or a stage not in dvc.lock) fails naming the
    stage; outputs absent from a clean clone (no workspace copy, no cache) pass."""
    (project / "src").mkdir()
    (project / "src" / "in.txt").write_text("hello\n")
    (project / "params.yaml").write_text("prep: {upper: true}\n")
    prep = ("import pathlib, yaml; t = pathlib.Path('src/in.txt').read_text(); "
            "p = yaml.safe_load(open('params.yaml'))['prep']; pathlib.Path('data').mkdir(exist_ok=True); "
            "pathlib.Path('data/out.txt').write_text(t.upper() if p['upper'] else t)")
    count = "import pathlib; pathlib.Path('count.txt').write_text(str(len(pathlib.Path('data/out.txt').read_text())))"
    stages = {"prep": {"cmd": _py(prep), "deps": ["src"], "params": ["prep"], "outs": ["data"]},
              "count": {"cmd": _py(count), "deps": ["data"], "outs": ["count.txt"]}}
    _stage_file(project, stages)

    res = _check(project, env)  # nothing in dvc.lock yet
    assert res.returncode == 1 and "stage prep" in res.stdout and "stage count" in res.stdout, res.stdout

    dvc(project, env, "repro")
    _commit(project, env, "pipeline")
    res = _check(project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "up to date" in res.stdout

    (project / "src" / "in.txt").write_text("changed\n")  # a dependency
    res = _check(project, env)
    assert res.returncode == 1, res.stdout
    assert "stage prep" in res.stdout and "src" in res.stdout and "stage count" not in res.stdout
    git(project, env, "checkout", "--", "src")

    (project / "params.yaml").write_text("prep: {upper: false}\n")  # a parameter
    res = _check(project, env)
    assert res.returncode == 1 and "stage prep" in res.stdout and "prep modified" in res.stdout, res.stdout
    git(project, env, "checkout", "--", "params.yaml")

    stages["count"]["cmd"] += "  # reworded"  # a command
    _stage_file(project, stages)
    res = _check(project, env)
    assert res.returncode == 1 and "stage count" in res.stdout and "changed command" in res.stdout, res.stdout
    git(project, env, "checkout", "--", "dvc.yaml")

    assert _check(project, env).returncode == 0
    shutil.rmtree(project / "data")  # a clean clone: no outputs, no cache
    (project / "count.txt").unlink()
    shutil.rmtree(project / ".dvc" / "cache")
    status = json.loads(dvc(project, env, "status", "--json").stdout)
    assert status["count"] == [{"changed deps": {"data": "deleted"}}, {"changed outs": {"count.txt": "not in cache"}}]
    res = _check(project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "absent" in res.stdout

    (project / "src" / "in.txt").write_text("changed\n")  # without data, a changed dependency still fails
    res = _check(project, env)
    assert res.returncode == 1 and "stage prep" in res.stdout, res.stdout
