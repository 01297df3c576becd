"""Install packages into a virtual environment with uv, from the sources pip is configured with; pip where uv cannot.

    <venv>/bin/python infra/install_packages.py [--no-deps] [-e] SPEC...     # into the interpreter's own venv

`make setup` and `make vllm` install about 250 packages into two fresh environments. pip unpacks and links them one
at a time; uv does the same installs (the same versions: both resolve against the same indexes with the same
constraints) in a fraction of the time. But uv does not read pip's configuration, and package sources are the
machine's to configure, never this repository's. So this reads pip's effective configuration (`pip config list`:
its files and PIP_* variables, later sources overriding earlier ones) and hands each setting to uv as the option
that means the same (FLAGS, SWITCHES, ENV). A setting it does not translate makes it install with pip instead, and
say why; so does a uv it cannot install (uv itself comes from pip, from those same sources) or MEDGYM_INSTALLER=pip.
No bytecode is compiled at install time (pip's --no-compile, uv's default): infra/warm_imports.py compiles what
the demo's processes import, a few thousand of the 53k modules.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

UV = "uv==0.13.9"
# the pip sections `pip install` reads, in the order pip applies them (a later one wins)
SECTIONS = ("global", "install", ":env:")
# pip options uv takes as command-line flags; multi-valued ones (whitespace-separated in pip's files) repeat the flag
FLAGS = {"index-url": ("--default-index", False), "extra-index-url": ("--index", True),
         "find-links": ("--find-links", True), "constraint": ("--constraint", True),
         "trusted-host": ("--allow-insecure-host", True)}
SWITCHES = {"no-index": "--no-index", "pre": "--prerelease=allow"}
# pip options uv reads from the environment
ENV = {"cert": "SSL_CERT_FILE", "client-cert": "SSL_CLIENT_CERT", "timeout": "UV_HTTP_TIMEOUT",
       "default-timeout": "UV_HTTP_TIMEOUT", "proxy": "HTTPS_PROXY"}
# pip options that change how pip talks or prints, never what it installs
IGNORED = {"disable-pip-version-check", "no-cache-dir", "cache-dir", "progress-bar", "quiet", "verbose", "no-input",
           "root-user-action", "no-warn-script-location", "require-virtualenv", "retries", "no-color", "log",
           "no-python-version-warning", "use-feature", "break-system-packages",
           "config-file"}  # PIP_CONFIG_FILE: the file is read, its settings listed on their own lines


@dataclass
class UvOptions:
    flags: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


class NotTranslatable(ValueError):
    """pip is configured with something uv would not do the same way."""


def pip_settings(listing: str) -> dict[str, str]:
    """`pip config list` output ("section.key='value'" lines, in the order pip loads them) as the values `pip install`
    ends up with: later lines override earlier ones; sections for other commands are left out."""
    settings: dict[str, str] = {}
    for line in listing.splitlines():
        name, sep, raw = line.partition("=")
        section, dot, key = name.rpartition(".")
        if not sep or not dot or section not in SECTIONS:
            continue
        # pip prints each value as a Python literal; a multi-valued one holds its items apart by whitespace or lines
        value = ast.literal_eval(raw) if raw and raw[0] in "'\"" else raw
        settings[key.replace("_", "-")] = " ".join(str(value).split())
    return settings


def _true(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


def uv_options(settings: Mapping[str, str]) -> UvOptions:
    """The uv flags and environment that install from where pip would; NotTranslatable for anything else."""
    out = UvOptions(flags=["--index-strategy", "unsafe-best-match"])  # pip takes the best version over every index
    for key, value in sorted(settings.items()):
        if key in FLAGS:
            flag, many = FLAGS[key]
            for item in (value.split() if many else [value]):
                out.flags += [flag, item]
        elif key in SWITCHES:
            if _true(value):
                out.flags.append(SWITCHES[key])
        elif key in ENV:
            out.env[ENV[key]] = value
        elif key not in IGNORED:
            raise NotTranslatable(f"pip's setting {key}={value!r} is not one this installer translates to uv")
    return out


def _pip(python: str, args: Sequence[str]) -> list[str]:
    return [python, "-m", "pip", "install", "--quiet", "--no-compile", *args]


def plan(python: str, args: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str], str]:
    """The install command, its environment and why that installer: uv where pip's sources translate, else pip."""
    venv = Path(python).parent
    if env.get("MEDGYM_INSTALLER", "uv") == "pip":
        return _pip(python, args), dict(env), "MEDGYM_INSTALLER=pip"
    listing = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, env=dict(env))
    if listing.returncode != 0:
        return _pip(python, args), dict(env), f"`pip config list` failed: {listing.stderr.strip()[-300:]}"
    try:
        options = uv_options(pip_settings(listing.stdout))
    except NotTranslatable as exc:
        return _pip(python, args), dict(env), str(exc)
    uv = venv / "uv"
    if not uv.is_file():
        got = subprocess.run(_pip(python, [UV]), env=dict(env), capture_output=True, text=True)
        if got.returncode != 0 or not uv.is_file():
            return _pip(python, args), dict(env), f"could not install {UV}: {got.stderr.strip()[-300:]}"
    cmd = [str(uv), "pip", "install", "--quiet", "--python", python, *options.flags, *args]
    return cmd, {**env, **options.env, "UV_NO_PROGRESS": "1"}, "uv"


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] in {"-h", "--help"}:
        print(__doc__)
        return 0 if argv else 2
    cmd, env, why = plan(sys.executable, list(argv), os.environ)
    if why != "uv":
        print(f"[install] pip, not uv: {why}", file=sys.stderr)
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
