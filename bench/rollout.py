"""Rollout throughput with the scripted teacher: episodes and environment steps per second at 1 and 2 workers,
local threads and Ray actors, in one run; the scaling from 1 to 2 workers, and the framework's own cost per
step beyond the sandbox's execution.

    python -m bench.rollout [--tasks N] [--backend process|docker] [--repeats R]

Every configuration plays the same N train tasks (k=1, mistakes on, so episodes have several steps) into a fresh
folder: by default the train tasks of the smoke profile's suite, two of each of its 89 categories (built once into
.state/bench/pipeline-suite, as bench/pipeline.py does); shards are written and validated as in a real collection.
Each configuration runs `--repeats` times, 1 and 2 workers interleaved; the table shows the median run, and the
ratio of each pair of runs beside the ratio of the medians. Framework cost per step = (time inside environment
steps - time the sandbox spent executing) / steps: parsing, feedback, checking and the episode record; the
scheduler's own loop = wall x workers - time inside steps, per step. Cores busy and machine CPU per step come from
the machine's CPU times over the run (psutil): when two workers use the same CPU per step as one, what they lose is
idle time (work that waits on the other's), not contention.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import psutil
import typer
from rich.console import Console
from rich.table import Table

from components.common.paths import PROJECT_ROOT
from components.envs.coding_env import EnvConfig
from components.policies.registry import PolicyConfig
from components.rollout.collect import collect
from components.rollout.jobs import SamplingPlan
from components.rollout.runner import CollectionConfig
from components.rollout.store import load_episodes_dir


def _run(tasks_path: Path, n: int, workers: int, ray: bool, backend: str) -> dict[str, float]:
    config = CollectionConfig(policy=PolicyConfig(backend="scripted", options={"mistake_rate": 0.5}),
                              plan=SamplingPlan(k=1), split="train", limit=n, workers=workers,
                              max_in_flight=max(8, 4 * workers), ray_address="local" if ray else None,
                              sandbox_backend=backend, env=EnvConfig(max_turns=8, exec_timeout_s=20))
    with tempfile.TemporaryDirectory() as tmp:
        start, cpu_before = time.perf_counter(), _machine_cpu()
        result = collect(tasks_path, Path(tmp), config)
        wall, cpu_after = time.perf_counter() - start, _machine_cpu()
        episodes = list(load_episodes_dir(Path(tmp)))
    turns = [t for e in episodes for t in e.turns]
    inside = sum(t.duration_s for t in turns)
    executing = sum(t.exec_result.duration_s for t in turns if t.exec_result is not None)
    resets = sum(e.env_time_s for e in episodes) - inside  # taking a started sandbox and uploading the task's files
    busy_s, total_s = cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1]
    return {"episodes": len(episodes), "steps": len(turns), "wall": wall, "success": result.summary.get("success", 0.0),
            "cores_busy": (os.cpu_count() or 1) * busy_s / max(total_s, 1e-9),
            "cpu_ms": 1000 * busy_s / max(len(turns), 1),
            "exec_ms": 1000 * executing / max(len(turns), 1), "reset_ms": 1000 * resets / max(len(episodes), 1),
            "framework_ms": 1000 * (inside - executing) / max(len(turns), 1),
            "loop_ms": 1000 * max(wall * workers - inside, 0.0) / max(len(turns), 1)}


def _machine_cpu() -> tuple[float, float]:
    """Seconds of CPU the whole machine spent busy and in all (every core; idle and iowait count as not busy): what
    the sandboxes, the kernel's work for them and this process used together."""
    times = psutil.cpu_times()
    # Linux counts guest time inside user and nice already
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    return total - times.idle - getattr(times, "iowait", 0.0), total


def main(tasks: int = 178, backend: str = "process", tasks_file: Path | None = None,
         repeats: int = typer.Option(3, min=1, help="runs of each configuration, 1 and 2 workers interleaved")) -> None:
    import ray

    from bench.pipeline import ensure_suite

    tasks_file = tasks_file or ensure_suite(PROJECT_ROOT / ".state" / "bench" / "pipeline-suite") / "tasks.jsonl"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=str(PROJECT_ROOT / ".state" / "ray"),
             runtime_env={"env_vars": {"PYTHONPATH": str(PROJECT_ROOT)}})
    runs: dict[tuple[bool, int], list[dict[str, float]]] = {}
    try:
        _run(tasks_file, 4, 1, False, backend)  # warm-up: page cache, imports, first sandbox start
        for ray_on in (False, True):
            for _ in range(repeats):  # interleaved, so a slow minute of the machine falls on both sides
                for workers in (1, 2):
                    runs.setdefault((ray_on, workers), []).append(_run(tasks_file, tasks, workers, ray_on, backend))
    finally:
        ray.shutdown()
    table = Table("runner", "workers", "episodes", "steps", "wall s (median)", "episodes/s", "steps/s", "× 1 worker",
                  "× 1 worker, each pair", "sandbox exec ms/step", "framework ms/step", "reset ms/episode",
                  "outside steps ms/step", "cores busy", "machine CPU ms/step", "success")
    def median(rs: list[dict[str, float]]) -> dict[str, float]:  # the run of median wall time
        return sorted(rs, key=lambda x: x["wall"])[len(rs) // 2]

    for (ray_on, workers), rs in runs.items():
        r, ones = median(rs), runs[(ray_on, 1)]
        one = median(ones)
        pairs = [(x["steps"] / x["wall"]) / (o["steps"] / o["wall"]) for x, o in zip(rs, ones, strict=True)]
        table.add_row("ray" if ray_on else "local", str(workers), str(r["episodes"]), str(r["steps"]),
                      f"{r['wall']:.1f}", f"{r['episodes'] / r['wall']:.2f}", f"{r['steps'] / r['wall']:.2f}",
                      f"{(r['steps'] / r['wall']) / (one['steps'] / one['wall']):.2f}",
                      " ".join(f"{p:.2f}" for p in pairs), f"{r['exec_ms']:.1f}", f"{r['framework_ms']:.1f}",
                      f"{r['reset_ms']:.1f}", f"{r['loop_ms']:.1f}", f"{r['cores_busy']:.2f}", f"{r['cpu_ms']:.1f}",
                      f"{r['success']:.0%}")
    Console(width=220).print(table)
    played = min(r["episodes"] for rs in runs.values() for r in rs)
    if played < tasks:  # a short run is mostly start-up
        print(f"note: {tasks_file} has {played} train tasks, not the {tasks} asked for")


if __name__ == "__main__":
    typer.run(main)
