"""Copy the installed distributions that a requirements file needs, and all they depend on, out of this
interpreter's environment into a folder: the compose stack's deps image (build.sh) takes them from the
environment the tests run in, instead of downloading and installing the same pinned versions again.

    python infra/docker/offline/copy_packages.py --requirements R.txt --dest DIR [--exclude NAME ...]

DIR/site-packages gets every file of each distribution in the closure (its RECORD), DIR/bin its console scripts
with their first line naming /usr/bin/python3 (the image's interpreter). Markers are evaluated for this
interpreter, extras as requested (`moto[server]`). A requirement this environment does not have fails the copy,
naming it and who asked for it: the image must not silently lack what a test imported. Compiled bytecode is left
out (the image does not write any either).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections import deque
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SHEBANG = b"#!/usr/bin/python3\n"


def closure(requirements: list[str], exclude: set[str]) -> dict[str, metadata.Distribution]:
    """Every installed distribution the requirements need, by canonical name (the excluded ones and what only they
    need left out)."""
    installed = {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    queue = deque((Requirement(r), "the requirements file") for r in requirements)
    while queue:
        req, asked_by = queue.popleft()
        name = canonicalize_name(req.name)
        if name in exclude:
            continue
        dist = installed.get(name)
        if dist is None:
            raise SystemExit(f"copy_packages: {req.name} (asked for by {asked_by}) is not installed in {sys.prefix}")
        if not req.specifier.contains(dist.version, prereleases=True):
            raise SystemExit(f"copy_packages: {asked_by} asks for {req}, and {sys.prefix} has {dist.version}")
        found[name] = dist
        for extra in ("", *sorted(req.extras)):  # "": the dependencies every install has
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            for dep in dist.requires or []:
                child = Requirement(dep)
                if child.marker is None or child.marker.evaluate({"extra": extra}):
                    queue.append((child, f"{req.name}[{extra}]" if extra else req.name))
    return found


def copy(dists: dict[str, metadata.Distribution], dest: Path) -> tuple[int, int]:
    """(files, console scripts) copied into dest/site-packages and dest/bin."""
    site, scripts = dest / "site-packages", dest / "bin"
    site.mkdir(parents=True, exist_ok=True)
    scripts.mkdir(parents=True, exist_ok=True)
    n_files = n_scripts = 0
    for dist in dists.values():
        root = Path(dist.locate_file(""))
        for entry in dist.files or []:
            src = Path(dist.locate_file(entry)).resolve()
            if "__pycache__" in entry.parts or not src.is_file():
                continue
            if entry.parts[0] == ".." and "bin" in entry.parts:  # a console script, outside site-packages
                target = scripts / src.name
                data = src.read_bytes()
                if data.startswith(b"#!") and re.match(rb"#![^\n]*python", data):
                    data = SHEBANG + data.split(b"\n", 1)[1]
                target.write_bytes(data)
                target.chmod(0o755)
                n_scripts += 1
                continue
            if not src.is_relative_to(root.resolve()):
                continue  # a data file installed elsewhere (share/, include/): the servers never read them
            target = site / src.relative_to(root.resolve())
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
            n_files += 1
    return n_files, n_scripts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requirements", type=Path, required=True)
    ap.add_argument("--dest", type=Path, required=True)
    ap.add_argument("--exclude", action="append", default=[], help="a distribution left out, and what only it needs")
    args = ap.parse_args()
    lines = [ln.split("#", 1)[0].strip() for ln in args.requirements.read_text().splitlines()]
    dists = closure([ln for ln in lines if ln], {canonicalize_name(n) for n in args.exclude})
    files, scripts = copy(dists, args.dest)
    print(f"copy_packages: {len(dists)} distributions, {files} files, {scripts} console scripts -> {args.dest}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
