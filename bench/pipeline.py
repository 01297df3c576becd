"""What orchestration costs: the same stages run through the pipeline (Prefect flows, the stage state and keys,
the parent MLflow run and each stage's tracking) and called directly as components, in the same run.

    python bench/pipeline.py [--teacher-tasks 16] [--base-tasks 4]

Both runs play the scripted teacher and the embedded tiny random model on the same tasks of a small suite and
train the same two SFT steps on the teacher's episodes, each into fresh folders. The orchestration share is
(pipeline − direct) / pipeline. The Prefect temporary server's start is a one-off per command and reported on
its own; so is a rerun that finds every stage cached (the pipeline's cost when nothing changed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STAGES = ["teacher", "base", "sft"]


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
    return path


def ensure_suite(path: Path) -> Path:
    from components.config import load_config
    from components.tasks.suite import build_suite
    from flows.data import suite_sandbox_opener

    if not (path / "tasks.jsonl").is_file():
        cfg = load_config("smoke")
        build_suite(path, cfg.data.suites["demo"], cfg.data.seed, suite_sandbox_opener(cfg.sandbox))
    return path


def direct(path: Path) -> float:
    """The stages' components, called in order without a flow, a state record or rollout tracking."""
    from components.config import load_config
    from components.rollout.collect import collect
    from components.training.stage import build_dataset, run_stage

    cfg = load_config(path)
    start = time.perf_counter()
    tasks = Path(cfg.data.out_dir) / "tasks.jsonl"
    for name in ("teacher", "base"):
        collect(tasks, cfg.rollout_dir(name), cfg.collection(name))
    build_dataset(cfg, "sft")
    run_stage(cfg, "sft", log_model=False, project_root=ROOT)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher-tasks", type=int, default=16)
    ap.add_argument("--base-tasks", type=int, default=4)
    args = ap.parse_args()

    import flows  # noqa: F401  (Prefect and MLflow state inside the project, telemetry off)
    from flows.pipeline import pipeline_flow
    from flows.runtime import prefect_api

    suite = ensure_suite(ROOT / ".state" / "bench" / "pipeline-suite")
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        d = tmp / "direct"
        d.mkdir()
        direct(profile(d, suite, "warm", args.teacher_tasks, args.base_tasks))  # imports, model cache, page cache
        d2 = tmp / "direct2"
        d2.mkdir()
        t_direct = direct(profile(d2, suite, "direct", args.teacher_tasks, args.base_tasks))
        p = tmp / "pipeline"
        p.mkdir()
        path = profile(p, suite, "pipeline", args.teacher_tasks, args.base_tasks)
        t0 = time.perf_counter()
        with prefect_api():
            t_server = time.perf_counter() - t0
            t0 = time.perf_counter()
            summary = pipeline_flow(profile=str(path), only=STAGES)
            t_pipeline = time.perf_counter() - t0
            t0 = time.perf_counter()
            again = pipeline_flow(profile=str(path), only=STAGES)
            t_cached = time.perf_counter() - t0
    assert {s["status"] for s in again["stages"].values()} == {"cached"}
    share = (t_pipeline - t_direct) / t_pipeline
    print(f"stages: {', '.join(STAGES)} ({args.teacher_tasks} teacher tasks x2, {args.base_tasks} base tasks, "
          f"{summary['stages']['sft']['global_step']} SFT steps)")
    print(f"{'run':<34}{'seconds':>10}")
    print(f"{'components called directly':<34}{t_direct:>10.1f}")
    print(f"{'pipeline (flows, state, tracking)':<34}{t_pipeline:>10.1f}")
    print(f"{'pipeline rerun, all cached':<34}{t_cached:>10.1f}")
    print(f"{'Prefect temporary server start':<34}{t_server:>10.1f}")
    print(f"orchestration share: {share:.1%} of the pipeline's wall time "
          f"(pipeline / direct = {t_pipeline / t_direct:.2f}x)")


if __name__ == "__main__":
    main()
