"""What `make demo` costs a newcomer: wall time per step and per pipeline stage, and peak memory, on a fresh clone,
setup included.

    python bench/demo.py [--rev HEAD] [--profile demo] [--make-target demo] [--workdir DIR] [--keep] [--no-setup]
                         [--command CMD] [--json PATH]

The repository is cloned at REV into a temporary folder (or --workdir), so nothing of this working tree comes
along: no data/, models/, .state/, mlflow/ store, no uncommitted change. The Makefile's rule for the target is read
at run time and each of its prerequisites is run and timed on its own first (a phony one as `make <it>`; a file,
such as the `.venv/.installed` stamp, as the phony target that stands for it, `make setup`), then `make <target>`
(or `--command`, any shell command, in place of make). `--no-setup` links this checkout's `.venv` and the folders
the setup targets fill (`.state/models`, `.state/sandbox-runtime`, `.state/vllm`) into the clone instead of
building them, sets PYTHONPATH to the clone (the shared environment's editable install points at the checkout it
was installed from: without it `.venv/bin/medgym` would run that checkout's code and write that checkout's state)
and tells make every prerequisite is up to date (`make -o`).

Memory, two figures, because they answer different questions:
- PSS of the process tree, sampled every 0.5 s (`TreeSampler`): the sum over every live process below this one
  (orphans included: this process is their subreaper) of its proportional set size from /proc/<pid>/smaps_rollup,
  RSS where that cannot be read. PSS, not RSS: forked workers and the sandbox zygote's children share pages, and
  summing RSS counts a shared page once per process. It leaves out page cache and tmpfs files nothing maps.
- the kernel's own peak of a fresh memory cgroup each step runs in (cgroup v1 `memory.max_usage_in_bytes`). It
  includes page cache (every file read or written: the clone, pip's wheels, the model files) and tmpfs, so it is
  an upper bound the kernel could reclaim most of, not what a run needs; its anonymous + shmem part (memory.stat
  `total_rss + total_shmem`, sampled with the tree) is printed beside it. On cgroup v2 no cgroup is made: a cgroup
  that holds make cannot delegate memory to the process sandbox's per-sandbox cgroups (v2's no-internal-process
  rule), so the demo would not run as it does for a newcomer; only the PSS figure is reported there.

Each pipeline stage's wall time comes from the clone's `.state/pipeline/<profile>/<stage>.json` records
(components/pipeline/state.py), in start order, with the tree's PSS peak within the stage's span; the learning
figures from `reports/<profile>/metrics.json`. Nothing is written to this checkout (with --no-setup, the linked
caches are shared: an entry missing there, a model or a runtime of another lock, would be built into them); the
clone is removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
GB = 1e9
CGROUP_FS = Path("/sys/fs/cgroup")
# what the setup targets build (`make setup`: the environment, the task runtime, the embedded models; `make vllm`:
# the vLLM environment); --no-setup links these from this checkout
SETUP_CACHES = (".venv", ".state/models", ".state/sandbox-runtime", ".state/vllm")
# settings a newcomer's shell does not have, that would point a run at this checkout's state or another server
FOREIGN_ENV = ("MEDGYM_", "PREFECT_", "MLFLOW_", "DVC_")


# ------------------------------------------------------------------------------------ the process-tree sampler
@dataclass
class Proc:
    pid: int
    bytes: int
    cmdline: str


def descendants(pid: int) -> list[psutil.Process]:
    """The live processes below `pid` (not itself)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


# Reading smaps_rollup walks the process's page tables under its mmap lock: for a 7 GB training process that is
# 0.12 s of kernel time per read, and page faults in the training threads wait on the same lock (twice a second,
# it slowed the demo's SFT from 7 to 11 s a step). Above this RSS a process is counted by its RSS (one cheap read of
# statm): a large process shares little with the others, so its RSS overstates its PSS by its shared libraries.
PSS_BELOW = 1 << 30


def process_memory(proc: psutil.Process) -> tuple[int, bool]:
    """(bytes, is_pss): PSS (psutil reads smaps_rollup) for a process under PSS_BELOW of RSS, else its RSS, and
    RSS where PSS may not be read (0 for a process gone)."""
    try:
        rss = proc.memory_info().rss
        return (proc.memory_full_info().pss, True) if rss < PSS_BELOW else (rss, False)
    except psutil.AccessDenied:
        with contextlib.suppress(psutil.Error):
            return proc.memory_info().rss, False
    except psutil.Error:
        pass
    return 0, False


def cmdline(proc: psutil.Process, limit: int = 160) -> str:
    try:
        text = " ".join(proc.cmdline())
    except psutil.Error:
        return "?"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class TreeSampler:
    """The peak memory of a process tree: every `interval` s, in a thread, the sum of PSS (RSS above PSS_BELOW or
    where PSS cannot be read) over `pid`'s live descendants, and `pid` itself when `include_root`. Keeps the peak, its time (epoch s)
    and the largest process at that moment, every sample as (epoch s, bytes) in `timeline`, and with a
    `MemoryCgroup`, the peak of its anonymous + shmem memory.

        with TreeSampler(proc.pid) as s:
            proc.wait()
        s.peak, s.peak_time, s.top_process
    """

    def __init__(self, pid: int, interval: float = 0.5, include_root: bool = True,
                 cgroup: MemoryCgroup | None = None) -> None:
        self.pid, self.interval, self.include_root, self.cgroup = pid, interval, include_root, cgroup
        self.peak = 0
        self.peak_time: float | None = None
        self.top_process: Proc | None = None
        self.cgroup_peak: int | None = None if cgroup is None else 0
        self.timeline: list[tuple[float, int]] = []
        self.rss_only: set[int] = set()  # processes counted by RSS: PSS unreadable, or too costly to read (PSS_BELOW)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tree-sampler-{pid}", daemon=True)

    def start(self) -> TreeSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def samples(self) -> int:
        return len(self.timeline)

    def peak_between(self, start: float, end: float) -> int | None:
        """The highest sample taken from `start` to `end` (epoch s), None without one."""
        return max((b for t, b in self.timeline if start <= t <= end), default=None)

    def __enter__(self) -> TreeSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                return

    def sample(self) -> int:
        """One sample now: the tree's total, folded into the peak."""
        procs = descendants(self.pid)
        if self.include_root:
            with contextlib.suppress(psutil.NoSuchProcess):
                procs.insert(0, psutil.Process(self.pid))
        total, top, top_size = 0, None, 0
        for proc in procs:
            size, is_pss = process_memory(proc)
            if not is_pss and size:
                self.rss_only.add(proc.pid)
            total += size
            if size > top_size:
                top, top_size = proc, size
        now = time.time()
        self.timeline.append((now, total))
        if total > self.peak:
            self.peak, self.peak_time = total, now
            self.top_process = Proc(top.pid, top_size, cmdline(top)) if top is not None else None
        if self.cgroup is not None:
            used = self.cgroup.anon_shmem()
            if used is not None:
                self.cgroup_peak = max(self.cgroup_peak or 0, used)
        return total


# ------------------------------------------------------------------------------------ the kernel's figure
class MemoryCgroup:
    """A fresh cgroup v1 memory cgroup below this process's own: a step's processes are put in it (before make
    starts), and its `memory.max_usage_in_bytes` is the kernel's peak for everything they charged, page cache and
    tmpfs included. `make()` returns (None, why) where none can be made (see the module's docstring for v2)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @staticmethod
    def make(name: str) -> tuple[MemoryCgroup | None, str]:
        if (CGROUP_FS / "cgroup.controllers").is_file():
            return None, ("cgroup v2: a cgroup holding make could not delegate memory to the process sandbox's "
                          "cgroups (no internal processes), so none is made; PSS only")
        own = None
        with contextlib.suppress(OSError), open("/proc/self/cgroup") as fh:
            for line in fh:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if "memory" in controllers.split(","):
                    own = path
        if own is None or not (CGROUP_FS / "memory").is_dir():
            return None, "no cgroup v1 memory hierarchy mounted at /sys/fs/cgroup/memory"
        path = CGROUP_FS / "memory" / own.lstrip("/") / name
        try:
            path.mkdir()
            hierarchical = (path / "memory.use_hierarchy").read_text().strip() == "1"
        except OSError as exc:
            return None, f"cannot make a memory cgroup at {path}: {exc}"
        cg = MemoryCgroup(path)
        if not hierarchical:  # the sandbox's own cgroups, made below this one, would not be counted
            cg.remove()
            return None, f"{path} is not hierarchical (memory.use_hierarchy 0): its peak would miss the sandboxes"
        return cg, f"cgroup v1 {path}"

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def max_usage(self) -> int:
        return int((self.path / "memory.max_usage_in_bytes").read_text())

    def anon_shmem(self) -> int | None:
        try:
            stat = dict(line.split() for line in (self.path / "memory.stat").read_text().splitlines())
        except OSError:
            return None
        return int(stat.get("total_rss", 0)) + int(stat.get("total_shmem", 0))

    def remove(self, wait_s: float = 5.0) -> bool:
        """rmdir once its processes are gone (charges left, page cache, move to the parent)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.2)


# ------------------------------------------------------------------------------------ the Makefile
def _logical_lines(text: str) -> list[str]:
    return text.replace("\\\n", " ").splitlines()


def make_rules(text: str) -> tuple[dict[str, list[str]], set[str], set[str]]:
    """Each explicit rule's prerequisites (order-only ones included), variables expanded; the phony targets; the
    targets with a recipe. Enough for a plain Makefile such as this project's: no functions or pattern rules."""
    variables: dict[str, str] = {}
    rules: list[tuple[str, str]] = []
    with_recipe: set[str] = set()
    for line in _logical_lines(text):
        if line.startswith("\t") and rules:
            with_recipe.add(rules[-1][0])
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        line = re.sub(r"\s+#.*$", "", line)
        var = re.match(r"^([A-Za-z_][A-Za-z0-9_.]*)\s*(\?|:{1,3}|\+)?=\s*(.*)$", line)
        if var:
            name, op, value = var.groups()
            if op == "?" and name in variables:
                continue
            variables[name] = (variables.get(name, "") + " " + value).strip() if op == "+" else value
            continue
        rule = re.match(r"^([^:=]+?)\s*::?(?!=)\s*(.*)$", line)
        if rule:
            rules.append((rule.group(1), rule.group(2).split(";", 1)[0]))

    def expand(s: str, depth: int = 0) -> str:
        if depth > 20:
            raise ValueError(f"cannot expand {s!r}")
        out = re.sub(r"\$[({]([A-Za-z_][A-Za-z0-9_.]*)[)}]", lambda m: variables.get(m.group(1), ""), s)
        return out if out == s else expand(out, depth + 1)

    prereqs: dict[str, list[str]] = {}
    phony: set[str] = set()
    recipes: set[str] = set()
    for targets, deps in rules:
        names, items = expand(targets).split(), expand(deps).replace("|", " ").split()
        for t in names:
            if t == ".PHONY":
                phony.update(items)
            else:
                prereqs.setdefault(t, []).extend(i for i in items if i not in prereqs.get(t, []))
                if targets in with_recipe:
                    recipes.add(t)
    return prereqs, phony, recipes


def setup_steps(makefile: Path, target: str) -> tuple[list[str], list[str]]:
    """(the make targets to run before `target`, one each, in order; its prerequisites). A phony prerequisite
    runs as itself; a file one as the phony target that only stands for it (no recipe, it the one prerequisite:
    the stamp's is `setup`), else as itself."""
    prereqs, phony, recipes = make_rules(makefile.read_text(encoding="utf-8"))
    if target not in prereqs:
        raise SystemExit(f"{makefile} has no rule for {target!r}")
    steps: list[str] = []
    for p in prereqs[target]:
        stands_for = [t for t in sorted(phony) if prereqs.get(t) == [p] and t not in recipes]
        step = p if p in phony else (stands_for[0] if stands_for else p)
        if step not in steps:
            steps.append(step)
    return steps, prereqs[target]


# ------------------------------------------------------------------------------------ the clone's records
def read_stages(folder: Path) -> list[dict[str, Any]]:
    """The pipeline's stage records under `.state/pipeline/<profile>/`, in start order (the run's own `_run.json`
    left out)."""
    if not folder.is_dir():
        return []
    out = []
    for path in folder.glob("*.json"):
        if path.name.startswith("_"):
            continue
        rec = json.loads(path.read_text(encoding="utf-8"))
        out.append({k: rec.get(k) for k in ("stage", "status", "started_at", "wall_s")})
    return sorted(out, key=lambda r: (r["started_at"] or 0.0, r["stage"]))


def stage_totals(stages: list[dict[str, Any]]) -> dict[str, float | None]:
    """The sum of the stages' wall times, and their span: first start to last end."""
    done = [s for s in stages if s["wall_s"] is not None]
    if not done:
        return {"sum_s": None, "span_s": None}
    start = min(s["started_at"] for s in stages)
    end = max(s["started_at"] + s["wall_s"] for s in done)
    return {"sum_s": round(sum(s["wall_s"] for s in done), 2), "span_s": round(end - start, 2)}


def stage_at(stages: list[dict[str, Any]], when: float | None) -> str | None:
    for s in stages:
        if when is not None and s["wall_s"] is not None and s["started_at"] <= when <= s["started_at"] + s["wall_s"]:
            return s["stage"]
    return None


def profile_paths(clone: Path, profile: str) -> tuple[str, Path, Path]:
    """(the profile's name, its stage-state folder, its metrics file) in the clone, from its YAML."""
    import yaml

    path = Path(profile) if Path(profile).suffix else Path("configs") / f"{profile}.yaml"
    raw = yaml.safe_load((clone / path).read_text(encoding="utf-8")) if (clone / path).is_file() else {}
    name = raw.get("profile", profile)
    pipeline = raw.get("pipeline") or {}
    state = clone / pipeline.get("state_dir", ".state/pipeline") / name
    return name, state, clone / pipeline.get("reports_dir", "reports") / name / "metrics.json"


# ------------------------------------------------------------------------------------ running a step
@dataclass
class Step:
    name: str
    argv: list[str]
    kind: str  # `make setup`, `make demo`, `command`: the total's label
    wall_s: float | None = None
    rc: int | None = None
    pss_peak_bytes: int = 0
    pss_peak_time: float | None = None
    top_process: dict[str, Any] | None = None
    rss_only_processes: int = 0
    cgroup_max_usage_bytes: int | None = None  # the kernel's, page cache and tmpfs included
    cgroup_anon_shmem_peak_bytes: int | None = None  # sampled
    cgroup_note: str = ""
    leftover: list[str] = field(default_factory=list)
    timeline: list[tuple[float, int]] = field(default_factory=list, repr=False)  # the sampler's, not in the JSON


def become_subreaper() -> None:
    """Orphans of the steps (daemonized servers) re-parent to this process, so the sampler still sees them."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def run_step(step: Step, cwd: Path, env: dict[str, str], tag: str, interval: float) -> Step:
    """Run `step.argv` in `cwd` in a fresh memory cgroup where one can be made, sampling this process's tree."""
    cg, step.cgroup_note = MemoryCgroup.make(f"medgym-bench-{os.getpid()}-{tag}")
    argv = step.argv if cg is None else ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cg.procs), *step.argv]
    print(f"\n=== {step.name} ({shlex.join(step.argv)}) in {cwd}", flush=True)
    sampler = TreeSampler(os.getpid(), interval=interval, include_root=False, cgroup=cg).start()
    t0 = time.monotonic()
    try:
        step.rc = subprocess.call(argv, cwd=cwd, env=env)
    finally:
        step.wall_s = round(time.monotonic() - t0, 2)
        sampler.stop()
        reap()  # the steps' orphans that have ended (this process is their subreaper)
        step.leftover = [f"{p.pid} {cmdline(p)}" for p in descendants(os.getpid())]
        step.pss_peak_bytes, step.pss_peak_time = sampler.peak, sampler.peak_time
        step.top_process = asdict(sampler.top_process) if sampler.top_process else None
        step.rss_only_processes = len(sampler.rss_only)
        if cg is not None:
            step.cgroup_max_usage_bytes, step.cgroup_anon_shmem_peak_bytes = cg.max_usage(), sampler.cgroup_peak
            if not step.leftover and not cg.remove():
                step.cgroup_note += " (left in place: could not be removed)"
        step.timeline = sampler.timeline
    if step.leftover:
        print(f"warning: {step.name} left processes running: {step.leftover}", file=sys.stderr)
    return step


def newcomer_env(clone: Path, linked_venv: bool) -> tuple[dict[str, str], list[str]]:
    """This process's environment without what points at this checkout or configures another server."""
    env, dropped = dict(os.environ), []
    for key in list(env):
        if key.startswith(FOREIGN_ENV) or key in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
            dropped.append(key)
            del env[key]
    mine = (str(ROOT), str((ROOT / ".venv").resolve()))
    path = [p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(mine)]
    if len(path) != len(env.get("PATH", "").split(os.pathsep)):
        dropped.append("PATH entries in this checkout")
    env["PATH"] = os.pathsep.join(path)
    if linked_venv:
        env["PYTHONPATH"] = str(clone)
    return env, dropped


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def link_setup(clone: Path) -> list[str]:
    """--no-setup: this checkout's environment and the caches setup fills, linked into the clone."""
    linked = []
    for rel in SETUP_CACHES:
        src = (ROOT / rel).resolve()
        if src.exists():
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            (clone / rel).symlink_to(src)
            linked.append(f"{rel} -> {src}")
    return linked


def check_imports(clone: Path, env: dict[str, str]) -> None:
    """With a linked environment the clone's code must be the one imported, or its state lands elsewhere."""
    out = subprocess.run([str(clone / ".venv/bin/python"), "-c", "import components, flows; "
                          "print(components.__file__); print(flows.__file__)"],
                         cwd="/", env=env, capture_output=True, text=True, check=True).stdout.split()
    wrong = [f for f in out if not Path(f).resolve().is_relative_to(clone.resolve())]
    if wrong:
        raise SystemExit(f"the linked environment imports {wrong}, not the clone's code: refusing to run")


# ------------------------------------------------------------------------------------ the report
def gb(n: int | None) -> str:
    return "-" if n is None else f"{n / GB:.2f}"


def secs(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f}"


W = 48  # the label column


def _label(text: str) -> str:
    return text if len(text) <= W - 1 else text[: W - 4] + "..."


def render(report: dict[str, Any]) -> str:
    """The report as a table: steps, the last one's stages in start order, totals, peak memory, learning figures."""
    lines = [f"\n{report['title']}"]
    lines += [f"  note: {note}" for note in report["notes"]]
    head = f"{'step':<{W}}{'wall s':>9}{'PSS peak GB':>13}{'cgroup peak GB':>16}{'anon+shmem GB':>15}"
    lines += ["", head, "-" * len(head), f"{'git clone (not in the total)':<{W}}{secs(report['clone_s']):>9}"]
    for st in report["steps"]:
        lines.append(f"{_label(st['name']):<{W}}{secs(st['wall_s']):>9}{gb(st['pss_peak_bytes']):>13}"
                     f"{gb(st['cgroup_max_usage_bytes']):>16}{gb(st['cgroup_anon_shmem_peak_bytes']):>15}"
                     + (f"   exit {st['rc']}" if st["rc"] else ""))
    stages, p = report["stages"], report["pipeline"]
    if stages:
        first = stages[0]["started_at"]
        lines.append(f"  its stages, in start order ({report['state_dir']}):")
        for s in stages:
            label = f"    {s['stage']} (+{s['started_at'] - first:.0f} s)" + (
                "" if s["status"] == "done" else f" [{s['status']}]")
            lines.append(f"{_label(label):<{W}}{secs(s['wall_s']):>9}{gb(s['pss_peak_bytes']):>13}")
        lines.append(f"{'    pipeline: sum of stages':<{W}}{secs(p['sum_s']):>9}")
        lines.append(f"{'    pipeline: first start to last end':<{W}}{secs(p['span_s']):>9}")
        if p["span_s"] is not None and report["steps"]:
            outside = (report["steps"][-1]["wall_s"] or 0.0) - p["span_s"]
            lines.append(f"{'    outside the stages (start-up, exit)':<{W}}{secs(outside):>9}")
    else:
        lines.append(f"  (no stage records in {report['state_dir']})")
    m = report["memory"]
    lines += ["-" * len(head), f"{'total (' + ' + '.join(s['kind'] for s in report['steps']) + ')':<{W}}"
              f"{secs(report['total_s']):>9}{gb(m['pss_peak_bytes']):>13}{gb(m['cgroup_max_usage_bytes']):>16}"
              f"{gb(m['cgroup_anon_shmem_peak_bytes']):>15}"]
    lines += ["", "peak memory:",
              f"  PSS of the process tree (sampled every {report['interval_s']} s; RSS for a process above 1 GiB "
              "or where PSS is unreadable): "
              f"{gb(m['pss_peak_bytes'])} GB in `{m['pss_peak_step']}`"
              + (f", during stage {m['pss_peak_stage']}" if m["pss_peak_stage"] else "")]
    if m["top_process"]:
        t = m["top_process"]
        lines.append(f"    largest process then: {gb(t['bytes'])} GB, pid {t['pid']}: {t['cmdline']}")
    lines.append(f"  cgroup, the kernel's max_usage_in_bytes (includes page cache and tmpfs): "
                 f"{gb(m['cgroup_max_usage_bytes'])} GB; its anon+shmem part (memory.stat, sampled): "
                 f"{gb(m['cgroup_anon_shmem_peak_bytes'])} GB")
    lines.append(f"    [{m['cgroup_note']}]")
    lines += ["", f"learning figures ({report['metrics_file']}):"]
    if report["metrics"]:
        width = max(len(k) for k in report["metrics"])
        lines += [f"  {k:<{width}}  {v:.4g}" if isinstance(v, float) else f"  {k:<{width}}  {v}"
                  for k, v in report["metrics"].items()]
    else:
        lines.append("  (none: the file is absent)")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", default="HEAD", help="the revision to clone (default HEAD)")
    ap.add_argument("--profile", default="demo", help="the profile whose stage records and metrics to read")
    ap.add_argument("--make-target", default="demo")
    ap.add_argument("--command", help="a shell command run in the clone instead of `make <target>` (after setup)")
    ap.add_argument("--workdir", type=Path, help="clone here (absent or empty) instead of a temporary folder")
    ap.add_argument("--keep", action="store_true", help="keep the clone")
    ap.add_argument("--no-setup", action="store_true", help="link this checkout's .venv and setup's caches instead")
    ap.add_argument("--interval", type=float, default=1.0, help="the memory sampler's period, s")
    ap.add_argument("--json", type=Path, help="write the report here too")
    args = ap.parse_args()

    sha = git("rev-parse", "--verify", f"{args.rev}^{{commit}}")
    notes = []
    if args.rev == "HEAD" and git("status", "--porcelain", "--untracked-files=no"):
        notes.append("this working tree has uncommitted changes: the clone holds the commit only")
    if args.workdir:
        if args.workdir.exists() and any(args.workdir.iterdir()):
            raise SystemExit(f"{args.workdir} is not empty")
        args.workdir.mkdir(parents=True, exist_ok=True)
        clone = args.workdir.resolve()
    else:
        clone = Path(tempfile.mkdtemp(prefix="medgym-demo-"))
    if clone.is_relative_to(ROOT):
        raise SystemExit(f"{clone} is inside this checkout: pick a folder outside it")
    json_out = args.json.resolve() if args.json else None
    become_subreaper()
    try:
        t0 = time.monotonic()
        subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(clone)], check=True)
        git("checkout", "--quiet", "--detach", sha, cwd=clone)
        clone_s = round(time.monotonic() - t0, 2)
        env, dropped = newcomer_env(clone, args.no_setup)
        if dropped:
            notes.append(f"left out of the environment: {', '.join(dropped)}")
        make_names, prereqs = setup_steps(clone / "Makefile", args.make_target)
        steps: list[Step] = []
        main_argv = ["make", args.make_target]
        if args.no_setup:
            linked = link_setup(clone)
            check_imports(clone, env)
            notes.append(f"--no-setup: setup not run or timed ({', '.join(make_names)}); linked {'; '.join(linked)};"
                         f" PYTHONPATH={clone}")
            main_argv = ["make", *[a for p in prereqs for a in ("-o", p)], args.make_target]
        else:
            steps += [Step(f"make {name}", ["make", name], kind=f"make {name}") for name in make_names]
        if args.command:
            steps.append(Step(args.command, ["sh", "-c", args.command], kind="command"))
        else:
            steps.append(Step(f"make {args.make_target}", main_argv, kind=f"make {args.make_target}"))
        for i, step in enumerate(steps):
            run_step(step, clone, env, str(i), args.interval)
            if step.rc:
                print(f"{step.name} failed (exit {step.rc})", file=sys.stderr)
                steps = steps[: i + 1]
                break

        name, state_dir, metrics_file = profile_paths(clone, args.profile)
        stages = read_stages(state_dir)
        for s in stages:  # each stage's own PSS peak, from the sampler's timeline of the step that ran them
            end = s["started_at"] + s["wall_s"] if s["wall_s"] is not None else float("inf")
            s["pss_peak_bytes"] = max((b for st in steps for t, b in st.timeline if s["started_at"] <= t <= end),
                                      default=None)
        peak = max(steps, key=lambda s: s.pss_peak_bytes)
        cg = [s.cgroup_max_usage_bytes for s in steps if s.cgroup_max_usage_bytes is not None]
        anon = [s.cgroup_anon_shmem_peak_bytes for s in steps if s.cgroup_anon_shmem_peak_bytes is not None]
        report: dict[str, Any] = {
            "title": f"{steps[-1].kind if steps else 'nothing'} on a fresh clone of {sha[:12]} ({args.rev}), "
                     f"profile {name}, {os.cpu_count()} cores, in {clone}",
            "rev": args.rev, "sha": sha, "profile": name, "clone_dir": str(clone), "notes": notes,
            "interval_s": args.interval, "clone_s": clone_s,
            "steps": [{k: v for k, v in asdict(s).items() if k != "timeline"} for s in steps],
            "state_dir": str(state_dir), "stages": stages, "pipeline": stage_totals(stages),
            "total_s": round(sum(s.wall_s or 0.0 for s in steps), 2),
            "ok": all(s.rc == 0 for s in steps) and len(steps) > 0,
            "memory": {"pss_peak_bytes": peak.pss_peak_bytes, "pss_peak_step": peak.name,
                       "pss_peak_time": peak.pss_peak_time, "pss_peak_stage": stage_at(stages, peak.pss_peak_time),
                       "top_process": peak.top_process,
                       "cgroup_max_usage_bytes": max(cg) if cg else None,
                       "cgroup_anon_shmem_peak_bytes": max(anon) if anon else None,
                       "cgroup_note": steps[-1].cgroup_note if steps else ""},
            "metrics_file": os.path.relpath(metrics_file, clone),
            "metrics": dict(sorted(json.loads(metrics_file.read_text()).items())) if metrics_file.is_file() else {},
        }
        print(render(report))
        if json_out:
            json_out.write_text(json.dumps(report, indent=1))
        return 0 if report["ok"] else 1
    finally:
        if args.keep:
            print(f"\nkept the clone: {clone}")
        else:
            shutil.rmtree(clone, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
