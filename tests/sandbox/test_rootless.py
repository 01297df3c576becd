"""The process backend without root: the hostile, isolation and holes suites, run again as an unprivileged user.

Cluster nodes give users neither root nor docker, but usually unprivileged user namespaces and a delegated cgroup
(systemd's `Delegate=yes`). The test builds that situation here: as root it delegates a cgroup (memory and pids)
to `nobody`, makes the interpreter reachable for that user in a private mount namespace (it may live under a
folder only root may enter, such as /root), moves the session into the cgroup and drops to `nobody` before pytest
starts. The backend then runs in a user namespace of its own, with the same limits; where neither root nor user
namespaces are there it refuses at start, and the message says what is missing (the last test).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
SUITES = ["tests/sandbox/test_hostile.py", "tests/sandbox/test_isolation.py", "tests/sandbox/test_holes.py"]


def _own_cgroups() -> dict[str, str]:
    found = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else ["unified"]:
            found[name] = path
    return found


def _delegate(tmp_name: str) -> list[Path]:
    """Cgroup folders with the memory and pids controllers, owned by `nobody`: a delegated subtree."""
    own = _own_cgroups()
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        base = Path("/sys/fs/cgroup" + own.get("unified", "/"))
        folder = base / tmp_name
        try:
            (base / "cgroup.subtree_control").write_text("+memory +pids")
            folder.mkdir()
        except OSError as exc:
            pytest.skip(f"cannot delegate a cgroup v2 subtree with memory and pids here: {exc}")
        folders = [folder]
    else:
        if "memory" not in own or "pids" not in own:
            pytest.skip("no cgroup v1 memory and pids hierarchies to delegate")
        folders = [Path(f"/sys/fs/cgroup/{name}{own[name]}") / tmp_name for name in ("memory", "pids")]
        for folder in folders:
            folder.mkdir()
    for folder in folders:
        for path in [folder, *folder.iterdir()]:
            os.chown(path, NOBODY, NOBODY)
    return folders


def _closed_ancestor(path: Path) -> Path | None:
    """The outermost folder above `path` that other users may not enter, if any."""
    for parent in reversed(path.parents):
        if parent != Path("/") and not os.stat(parent).st_mode & 0o001:
            return parent
    return None


def _as_nobody(command: str, home: Path, cgroups: list[Path]) -> subprocess.CompletedProcess[str]:
    """Run `command` as nobody (HOME and TMPDIR `home`), inside the delegated cgroups, with this interpreter
    reachable."""
    prefix = Path(sys.base_prefix)
    lines = ["set -e"]
    lines += [f"echo $$ > {shlex.quote(str(c / 'cgroup.procs'))}" for c in cgroups]
    closed = _closed_ancestor(prefix)
    if closed is not None:
        keep = home / "interpreter"
        keep.mkdir(exist_ok=True)
        lines += [f"mount --bind {shlex.quote(str(prefix))} {keep}",
                  f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(closed))}",
                  f"mkdir -p {shlex.quote(str(prefix))}",
                  f"mount --move {keep} {shlex.quote(str(prefix))}"]
    env = (f"env -i PATH=/usr/bin:/bin HOME={home} TMPDIR={home} PYTHONPATH={REPO} "
           "PYTHONDONTWRITEBYTECODE=1")
    lines.append(f"exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups {env} {command}")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines)],
                          capture_output=True, text=True, cwd=REPO, timeout=840)


@pytest.fixture
def home():
    """A folder of nobody's own that nobody can reach (pytest's tmp_path sits below folders only root may enter)."""
    folder = Path(tempfile.mkdtemp(prefix="medgym-nobody-"))
    os.chmod(folder, 0o755)
    os.chown(folder, NOBODY, NOBODY)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def delegated():
    if os.geteuid() != 0:
        pytest.skip("setting up a non-root user's session (a delegated cgroup) needs root")
    for tool in ("unshare", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"util-linux `{tool}` is missing")
    cgroups = _delegate(f"medgym-rootless-{os.getpid()}")
    yield cgroups
    for folder in cgroups:
        for child in sorted(folder.rglob("*"), key=lambda p: -len(p.parts)):
            if child.is_dir():
                child.rmdir()
        folder.rmdir()


def test_hostile_suites_pass_as_a_non_root_user(delegated, home):
    python = shlex.quote(sys.executable)
    out = _as_nobody(f"{python} -m pytest -q -rs -p no:cacheprovider -m 'not docker' {' '.join(SUITES)} "
                     f"--basetemp={home / 'pytest'}", home, delegated)
    tail = (out.stdout + out.stderr)[-6000:]
    assert out.returncode == 0, tail
    assert " passed" in out.stdout and "SKIPPED" not in out.stdout, tail


PROBE = """
import os
from components.sandbox.process import ProcessSandbox
from components.sandbox.protocol import Limits
with ProcessSandbox(Limits(memory_mb=64)) as sb:
    print("uid", os.getuid(), sb.uid)
    print(sb.exec("import os; print(os.getuid(), open('/proc/self/status').read().split('CapEff:')[1].split()[0])").stdout)
"""


def test_rootless_code_runs_without_capabilities(delegated, home):
    out = _as_nobody(f"{shlex.quote(sys.executable)} -c {shlex.quote(PROBE)}", home, delegated)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.split("\n")
    assert lines[0] == f"uid {NOBODY} None", out.stdout
    # the user namespace's root, with no capability left (in the sandbox's own namespaces)
    assert lines[1] == "0 0000000000000000", out.stdout


def test_without_root_or_a_delegated_cgroup_the_backend_refuses_saying_why(home):
    if os.geteuid() != 0:
        pytest.skip("dropping to another user needs root")
    code = ("from components.sandbox.process import process_unavailable\n"
            "print(process_unavailable())\n")
    out = _as_nobody(f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}", home, cgroups=[])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "cgroup" in out.stdout and "memory" in out.stdout and "docker" in out.stdout, out.stdout
