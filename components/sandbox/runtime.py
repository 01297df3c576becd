"""The task runtime of the `process` backend: a virtual environment installed from `runtime.lock`, nothing else.

Agent code and reference solutions import only what this environment holds (the same pinned wheels that the docker
image installs), never the project's own package or the host interpreter's site-packages. It is built once per
lock, in `.state/sandbox-runtime/` of the checkout (MEDGYM_SANDBOX_RUNTIME overrides), under a file lock, into a
temporary directory that is renamed into place: a build that dies leaves nothing half-made behind.

    python -m components.sandbox.runtime     # build it now (make setup does); prints its interpreter
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from components.common.paths import PROJECT_ROOT

LOCK_FILE = Path(__file__).with_name("runtime.lock")
DEFAULT_HOME = PROJECT_ROOT / ".state" / "sandbox-runtime"
STAMP = "medgym-runtime.json"


class RuntimeBuildError(RuntimeError):
    """The runtime could not be built."""


@dataclass(frozen=True)
class Runtime:
    env: Path  # the virtual environment's directory on the host
    base_prefix: Path  # the interpreter it was made from (its stdlib and binary are bound into the sandbox)
    python_version: str

    @property
    def site_packages(self) -> Path:
        return self.env / "lib" / f"python{self.python_version}" / "site-packages"


def lock_digest() -> str:
    return hashlib.sha256(LOCK_FILE.read_bytes()).hexdigest()[:16]


def locked_versions() -> dict[str, str]:
    """{distribution name (lower case): version} as pinned in runtime.lock."""
    out = {}
    for line in LOCK_FILE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[name.strip().lower().replace("_", "-")] = version.strip()
    return out


def runtime_home() -> Path:
    return Path(os.environ.get("MEDGYM_SANDBOX_RUNTIME") or DEFAULT_HOME)


def ensure_runtime(home: Path | None = None, quiet: bool = False) -> Runtime:
    """The runtime for the current lock, built first if it is missing or stale."""
    home = home or runtime_home()
    env = home / f"env-{lock_digest()}"
    found = _read_stamp(env)
    if found:
        return found
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it right now: wait for it
        found = _read_stamp(env)
        if found:
            return found
        _build(env, quiet)
        for stale in home.glob("env-*"):
            if stale != env and not stale.name.endswith(".tmp"):
                shutil.rmtree(stale, ignore_errors=True)
    found = _read_stamp(env)
    assert found is not None
    return found


def _read_stamp(env: Path) -> Runtime | None:
    try:
        meta = json.loads((env / STAMP).read_text())
    except (OSError, ValueError):
        return None
    if meta.get("lock") != lock_digest() or not Path(meta["base_prefix"]).is_dir():
        return None
    return Runtime(env, Path(meta["base_prefix"]), meta["python_version"])


def _base_python() -> Path:
    """The interpreter behind this one (the project's venv is never what the sandbox runs)."""
    return Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))


def _build(env: Path, quiet: bool) -> None:
    tmp = env.with_name(env.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    version = sysconfig.get_python_version()
    say = (lambda _msg: None) if quiet else (lambda msg: print(f"[sandbox runtime] {msg}", file=sys.stderr, flush=True))
    say(f"building the task runtime from {LOCK_FILE.name} in {env} (once per lock)")
    try:
        subprocess.run([str(_base_python()), "-m", "venv", "--without-pip", str(tmp)], check=True,
                       capture_output=True, text=True)
        site = tmp / "lib" / f"python{version}" / "site-packages"
        # The project's own pip installs into the new environment: --no-deps, so only what the lock names arrives.
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--root-user-action=ignore", "--no-deps",
             "--only-binary=:all:", "--target", str(site), "-r", str(LOCK_FILE)],
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise RuntimeBuildError(f"installing {LOCK_FILE} failed:\n{proc.stderr[-3000:]}")
        base_prefix = subprocess.run([str(tmp / "bin" / "python"), "-I", "-c", "import sys; print(sys.base_prefix)"],
                                     check=True, capture_output=True, text=True).stdout.strip()
        (tmp / STAMP).write_text(json.dumps({"lock": lock_digest(), "base_prefix": base_prefix,
                                             "python_version": version}))
        os.replace(tmp, env)
    except subprocess.CalledProcessError as exc:
        raise RuntimeBuildError(f"building the sandbox runtime failed: {exc.stderr or exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
    say("task runtime ready")


def host_site_dirs(rt: Runtime) -> list[str]:
    """The base interpreter's and the distribution's package folders: hidden inside the sandbox."""
    v = rt.python_version
    cands = [rt.base_prefix / "lib" / f"python{v}" / "site-packages", Path("/usr/lib/python3/dist-packages"),
             Path(f"/usr/local/lib/python{v}/dist-packages"), Path(f"/usr/local/lib/python{v}/site-packages"),
             Path(f"/usr/lib/python{v}/site-packages"), Path(f"/usr/lib/python{v}/dist-packages")]
    return sorted({str(p) for p in cands if p.is_dir()})


if __name__ == "__main__":
    print(ensure_runtime().env / "bin" / "python")
