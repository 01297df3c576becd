"""What orchestration costs: the same stages run through the pipeline (Prefect flows, the stage state and keys,
the parent MLflow run and each stage's tracking) and called directly as components, in the same run.

    python bench/pipeline.py [--teacher-tasks 16] [--base-tasks 4] [--rounds 3]

Both runs play the scripted teacher and the embedded tiny random model on the same tasks of a small suite and
train the same two SFT steps on the teacher's episodes, each into fresh folders, `--rounds` times each, in
alternating order so that load drifting over the bench falls on both alike; figures are medians over rounds.

The orchestration share is the pipeline's own cost over its wall time: the time a pipeline run spends outside
the components' calls (the calls the direct run makes, timed inside the run), plus the CPU time the Prefect
server took meanwhile, all of it charged as if taken from the components. That counts twice the server's work
while the pipeline waits on its answer (a flow run's creation, an artifact), in the time outside and again as the
server's CPU; `counted once`, printed beside, charges only the server's CPU while the components ran. It is
measured within each run because on a machine shared with other work two runs of the same thing differ by more
than the whole share (direct runs minutes apart took 28.7 s and 39.8 s): the difference of the pipeline's and the
direct run's medians is printed too, with every round, and it moves by that much.

Each run starts from a fresh folder and an MLflow store whose tables exist (creating them takes seconds once per
store, not per run, and both runs paid it), and each pipeline run computes its stage keys afresh, as a command
does: what each module imports comes from the checkout's store (`.state/closure-names.json`), as it does for every
command after the first in a checkout. The Prefect temporary server's start is a one-off per command and reported
on its own; so is a rerun that finds every stage cached (the pipeline's cost when nothing changed).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STAGES = ["teacher", "base", "sft"]
# the component calls the pipeline's flows make: the calls `direct` makes
COMPONENT_CALLS = (("flows.rollout", "collect"), ("flows.training", "build_dataset"), ("flows.training", "run_stage"))


def profile(tmp: Path, suite: Path, name: str, teacher_tasks: int, base_tasks: int) -> Path:
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    raw.update(profile=f"bench-{name}", focus=None)
    raw["data"]["out_dir"] = str(suite)
    raw["tracking"] = {"mlflow_uri": f"sqlite:///{tmp / 'mlruns.db'}", "artifact_location": str(tmp / "artifacts"),
                       "experiment": "bench-pipeline"}
    raw["rollouts"] = {n: {**raw["rollouts"][n], "limit": limit, "out_dir": str(tmp / "rollouts" / n)}
                       for n, limit in (("teacher", teacher_tasks), ("base", base_tasks))}
    raw["training"] = {"base_model": raw["training"]["base_model"], "sft": raw["training"]["sft"],
                       "out_dir": str(tmp / "models"), "data_dir": str(tmp / "training")}
    raw["pipeline"] = {"state_dir": str(tmp / "state"), "reports_dir": str(tmp / "reports")}
    raw.pop("registry", None)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=raw["tracking"]["mlflow_uri"]).search_experiments()  # the store's tables, off the clock
    return path


def ensure_suite(path: Path) -> Path:
    from components.profile.config import load_config
    from components.tasks.suite import build_suite
    from flows.data import suite_sandbox_opener

    if not (path / "tasks.jsonl").is_file():
        cfg = load_config("smoke")
        build_suite(path, cfg.data.suites["demo"], cfg.data.seed, suite_sandbox_opener(cfg.sandbox))
    return path


def direct(path: Path) -> float:
    """The stages' components, called in order without a flow, a state record or rollout tracking."""
    from components.pipeline.paths import init_model, stage_dirs
    from components.profile.config import load_config
    from components.rollout.collect import collect
    from components.training.stage import build_dataset, run_stage

    cfg = load_config(path)
    start = time.perf_counter()
    tasks = Path(cfg.data.out_dir) / "tasks.jsonl"
    for name in ("teacher", "base"):
        collect(tasks, cfg.rollout_dir(name), cfg.collection(name))
    build_dataset(cfg, "sft", stage_dirs(cfg, "sft"), stage_dirs(cfg, "verifier"))
    run_stage(cfg, "sft", stage_dirs(cfg, "sft"), init_model(cfg, "sft"), log_model=False, project_root=ROOT)
    return time.perf_counter() - start


@dataclasses.dataclass
class Inside:
    """What `inside_components` measured: seconds inside each of COMPONENT_CALLS, the server's CPU seconds then."""

    calls: dict[str, float] = dataclasses.field(default_factory=dict)
    server_cpu: float = 0.0


@contextlib.contextmanager
def inside_components(cpu: Callable[[], float]) -> Iterator[Inside]:
    """Seconds spent inside each of COMPONENT_CALLS while this is open, and the server's CPU (`cpu`, server_cpu's)
    while they ran."""
    inside = Inside()
    modules = [(importlib.import_module(module), name) for module, name in COMPONENT_CALLS]
    saved = [getattr(module, name) for module, name in modules]

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            c0, t0 = cpu(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                inside.calls[name] = inside.calls.get(name, 0.0) + time.perf_counter() - t0
                inside.server_cpu += cpu() - c0
        return call

    for (module, name), fn in zip(modules, saved, strict=True):
        setattr(module, name, timed(name, fn))
    try:
        yield inside
    finally:
        for (module, name), fn in zip(modules, saved, strict=True):
            setattr(module, name, fn)


def server_cpu() -> Callable[[], float]:
    """The CPU seconds so far of the Prefect server this process started (prefect_api's)."""
    import psutil

    def is_server(p: psutil.Process) -> bool:  # `prefect server start` (flows/runtime.py) under its orphan guard
        argv = p.cmdline()
        return any(a.endswith("prefect") for a in argv) and "server" in argv and "start" in argv

    servers = [p for p in psutil.Process().children() if is_server(p)]
    assert len(servers) == 1, f"expected this process's one temporary Prefect server, found {len(servers)}"

    def cpu() -> float:  # the server and what it started (its uvicorn process), alive now
        procs = [servers[0], *servers[0].children(recursive=True)]
        return sum(sum(p.cpu_times()[:2]) for p in procs if p.is_running())

    return cpu


def pipeline(path: Path, cpu: Callable[[], float]) -> tuple[float, float, float, float, dict]:
    """One pipeline run of the stages, its stage keys computed afresh (each run reads the code anew, as a command
    does): its wall time, the part of it inside the components' calls, the server's CPU time meanwhile and the part
    of that while the components ran, its summary."""
    from flows.pipeline import pipeline_flow

    with inside_components(cpu) as inside:
        cpu0, start = cpu(), time.perf_counter()
        summary = pipeline_flow(profile=str(path), only=STAGES)
        wall, served = time.perf_counter() - start, cpu() - cpu0
    missing = {name for _, name in COMPONENT_CALLS} - set(inside.calls)
    assert not missing, f"the pipeline no longer calls {missing} where this bench times it: fix COMPONENT_CALLS"
    return wall, sum(inside.calls.values()), served, inside.server_cpu, summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher-tasks", type=int, default=16)
    ap.add_argument("--base-tasks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    os.environ.pop("PREFECT_API_URL", None)  # a temporary server of the bench's own, whose CPU time it counts
    import flows  # noqa: F401  (Prefect and MLflow state inside the project, telemetry off)
    from flows.pipeline import pipeline_flow
    from flows.runtime import prefect_api

    suite = ensure_suite(ROOT / ".state" / "bench" / "pipeline-suite")
    runs: dict[str, list[float]] = {"direct": [], "pipeline": [], "outside": [], "server": [], "server_inside": [],
                                    "share": [], "share_once": []}
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)

        def fresh(name: str) -> Path:
            folder = tmp / name
            folder.mkdir()
            return profile(folder, suite, name, args.teacher_tasks, args.base_tasks)

        direct(fresh("warm"))  # imports, model cache, page cache
        t0 = time.perf_counter()
        with prefect_api():
            t_server = time.perf_counter() - t0
            cpu = server_cpu()
            for r in range(args.rounds):
                for kind in ("direct", "pipeline") if r % 2 == 0 else ("pipeline", "direct"):
                    if kind == "direct":
                        runs["direct"].append(direct(fresh(f"direct{r}")))
                        continue
                    piped = fresh(f"pipeline{r}")
                    wall, inside, served, served_inside, summary = pipeline(piped, cpu)
                    runs["pipeline"].append(wall)
                    runs["outside"].append(wall - inside)
                    runs["server"].append(served)
                    runs["server_inside"].append(served_inside)
                    runs["share"].append((wall - inside + served) / wall)
                    runs["share_once"].append((wall - inside + served_inside) / wall)
            t0 = time.perf_counter()
            again = pipeline_flow(profile=str(piped), only=STAGES)
            t_cached = time.perf_counter() - t0
    assert {s["status"] for s in again["stages"].values()} == {"cached"}
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"stages: {', '.join(STAGES)} ({args.teacher_tasks} teacher tasks x2, {args.base_tasks} base tasks, "
          f"{summary['stages']['sft']['global_step']} SFT steps); medians of {args.rounds} rounds")
    print(f"{'run':<44}{'seconds':>8}   rounds")
    for label, kind in (("components called directly", "direct"), ("pipeline (flows, state, tracking)", "pipeline"),
                        ("  of which outside the components' calls", "outside"),
                        ("  Prefect server CPU meanwhile", "server"),
                        ("    of which while the components ran", "server_inside")):
        print(f"{label:<44}{med[kind]:>8.1f}   {' '.join(f'{x:.1f}' for x in runs[kind])}")
    print(f"{'pipeline rerun, all cached':<44}{t_cached:>8.1f}")
    print(f"{'Prefect temporary server start':<44}{t_server:>8.1f}")
    print(f"orchestration share: {med['share']:.1%} of the pipeline's wall time (outside the components' calls "
          f"+ the server's CPU; rounds: {' '.join(f'{x:.1%}' for x in runs['share'])})")
    print(f"counted once: {med['share_once']:.1%} (the server's CPU while the pipeline waited on it is in the time "
          f"outside already; rounds: {' '.join(f'{x:.1%}' for x in runs['share_once'])})")
    print(f"pipeline - direct: {(med['pipeline'] - med['direct']) / med['pipeline']:.1%} of the pipeline's wall time "
          f"(pipeline / direct = {med['pipeline'] / med['direct']:.2f}x; two runs, which other work moves as much)")


if __name__ == "__main__":
    main()
