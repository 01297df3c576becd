"""Sandbox speed: median wall time per execution, per backend and mode, against a bare `python -c` (the floor).

    python -m bench.sandbox [--repeat N]

Rows: bare subprocess (floor), process cold (a new sandbox per exec, as every episode opens one), process
stateless, process stateful, docker cold (a new sandbox per exec),
docker warm (one sandbox reused) and docker warm pool (a sandbox per exec taken from a pool of started
containers, as rollouts use it); the docker rows are skipped with a note when no engine answers.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import typer
from rich.console import Console
from rich.table import Table

from components.sandbox.protocol import Limits

TASKS = {
    "print(1)": "print(1)\n",
    "pandas groupby": (
        "import numpy as np, pandas as pd\n"
        "df = pd.DataFrame({'g': np.arange(1000) % 7, 'v': np.arange(1000, dtype=float)})\n"
        "print(df.groupby('g').v.mean().sum())\n"
    ),
}
LIMITS = Limits(timeout_s=30, memory_mb=1024)


def _median_ms(fn: Callable[[], None], repeat: int, prepare: Callable[[], object] | None = None) -> float:
    fn()  # warm-up: page cache, first import
    times = []
    for _ in range(repeat):
        if prepare is not None:
            prepare()  # untimed: e.g. let a pool refill, as it does between episodes
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def _bare(code: str) -> Callable[[], None]:
    def run() -> None:
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)

    return run


def _checked_exec(sb, code: str) -> None:  # noqa: ANN001 - any Sandbox
    res = sb.exec(code)
    if res.status != "ok":
        raise RuntimeError(f"bench task failed in {type(sb).__name__}: {res.status} {res.stderr[-500:]}")


def _docker_reason() -> str | None:
    try:
        from components.sandbox.docker import docker_available
    except ImportError as e:
        return f"docker backend not importable ({e})"
    return None if docker_available() else "no docker engine answers"


def _process_start(repeat: int) -> tuple[float, float]:
    """Median wall time of opening (and closing, untimed) a process sandbox, and the CPU all processes spent per
    start: this process's own, and its children's, the zygote's and the sandboxes' it reaped included."""
    import psutil

    from components.sandbox.process import ProcessSandbox

    ProcessSandbox(LIMITS).close()  # warm-up: the zygote (or the runtime's page cache) starts once

    def cpu() -> float:
        me = psutil.Process()
        total = 0.0
        for p in [me, *me.children(recursive=True)]:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        return total

    walls = []
    before = cpu()
    for _ in range(repeat):
        t = time.perf_counter()
        sb = ProcessSandbox(LIMITS)
        walls.append(time.perf_counter() - t)
        sb.close()
    return statistics.median(walls) * 1000, (cpu() - before) / repeat * 1000


def main(repeat: int = typer.Option(15, min=1, help="Timed executions per row and task.")) -> None:
    from components.sandbox.process import ProcessSandbox

    rows: list[tuple[str, dict[str, float] | str]] = []
    notes_extra: list[str] = []
    started = time.perf_counter()
    rows.append(("bare python -c (floor)", {name: _median_ms(_bare(code), repeat) for name, code in TASKS.items()}))
    def process_cold(code: str) -> Callable[[], None]:
        def run() -> None:
            with ProcessSandbox(LIMITS) as sb:
                _checked_exec(sb, code)

        return run

    rows.append(("process cold (new sandbox per exec)",
                 {name: _median_ms(process_cold(code), repeat) for name, code in TASKS.items()}))
    start_ms, cpu_ms = _process_start(repeat)
    notes_extra.append(f"process sandbox start (open to first answer): median {start_ms:.1f} ms wall, "
                       f"{cpu_ms:.1f} ms of CPU per start (every process it took, the host's included)")
    for label, stateful in (("process stateless", False), ("process stateful", True)):
        t = time.perf_counter()
        with ProcessSandbox(LIMITS, stateful=stateful) as sb:
            startup_ms = (time.perf_counter() - t) * 1000
            rows.append(
                (
                    f"{label} (startup {startup_ms:.0f} ms)",
                    {name: _median_ms(lambda c=code: _checked_exec(sb, c), repeat) for name, code in TASKS.items()},
                )
            )
    reason = _docker_reason()
    if reason:
        rows.append(("docker cold", reason))
        rows.append(("docker warm", reason))
        rows.append(("docker warm pool", reason))
    else:
        from components.sandbox.docker import DockerPool, DockerSandbox

        def cold(code: str) -> Callable[[], None]:
            def run() -> None:
                sb = DockerSandbox(LIMITS)
                try:
                    _checked_exec(sb, code)
                finally:
                    sb.close()

            return run

        rows.append(
            (
                "docker cold (new sandbox per exec)",
                {name: _median_ms(cold(code), max(3, repeat // 3)) for name, code in TASKS.items()},
            )
        )
        warm = DockerSandbox(LIMITS)
        try:
            rows.append(
                (
                    "docker warm (one sandbox reused)",
                    {name: _median_ms(lambda c=code: _checked_exec(warm, c), repeat) for name, code in TASKS.items()},
                )
            )
        finally:
            warm.close()

        # the rollout path: a fresh sandbox per episode taken from a pool of started containers; a used container is
        # removed, never handed on, and the pool refills in the background (between episodes, untimed here)
        with DockerPool(LIMITS, size=2) as pool:
            t = time.perf_counter()
            pool.wait_ready()
            fill_s = time.perf_counter() - t

            def pooled(code: str) -> Callable[[], None]:
                def run() -> None:
                    with DockerSandbox(LIMITS, pool=pool) as sb:
                        _checked_exec(sb, code)

                return run

            rows.append(
                (
                    "docker warm pool (sandbox per exec from a pool)",
                    {name: _median_ms(pooled(code), repeat, pool.wait_ready) for name, code in TASKS.items()},
                )
            )
            notes_extra.append(f"docker pool: {pool.size} fresh containers started in {fill_s:.2f} s")

    floor = rows[0][1]
    assert isinstance(floor, dict)
    table = Table(title=f"Sandbox: median wall time per execution (repeat={repeat})")
    table.add_column("runner")
    for name in TASKS:
        table.add_column(f"{name} ms", justify="right")
        table.add_column("x floor", justify="right")
    notes = list(notes_extra)
    for label, cells in rows:
        if isinstance(cells, str):
            table.add_row(label, *["skipped"] * (2 * len(TASKS)))
            notes.append(f"{label} skipped: {cells}")
            continue
        table.add_row(label, *[v for name in TASKS for v in (f"{cells[name]:.1f}", f"{cells[name] / floor[name]:.2f}")])
    console = Console(width=max(Console().width, 110))
    console.print(table)
    for note in notes:
        console.print(note)
    console.print(f"total bench time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    typer.run(main)
