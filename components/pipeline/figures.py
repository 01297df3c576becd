"""What DVC's plots read: each stage's figures and data series, copied out of the folders it versions.

A stage versions whole folders (a merged model, a leaderboard). DVC resolves a top-level plot that lies inside a
folder out by loading that folder's listing from the cache, and where the listing is absent (another profile's
lock, checked in but never run on this clone) `dvc exp run`, `dvc plots show` and `dvc exp show` fail for the
whole repository, not for that plot. So what the plots read are file outs of their own, one folder per stage:
`<reports>/<profile>/plots/<stage>/<name>`, copied from where the stage wrote them (`StageKind.plots` in its
first out, `StageKind.series`) each time the pipeline runs or skips the stage.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from components.common.io import atomic_write
from components.pipeline.kinds import kind_of

if TYPE_CHECKING:
    from components.pipeline.plan import Plan, Stage

FOLDER = "plots"


def figure_files(plan: Plan, stage: Stage) -> dict[Path, Path]:
    """Each file a plot reads (relative to the project) -> the file the stage writes it as."""
    kind = kind_of(stage.kind)
    outs = kind.outs(plan, stage)
    sources = [outs[0] / name for name in kind.plots] if outs else []
    sources += [Path(f) for plot in kind.series(plan, stage).values() for f in plot["y"]]
    folder = plan.cfg.pipeline.reports_dir / plan.cfg.profile / FOLDER / stage.name
    published = {folder / src.name: src for src in sources}
    if len(published) != len(sources):
        raise ValueError(f"stage {stage.name!r}: two of its plot files share a name ({', '.join(map(str, sources))})")
    return published


def publish(plan: Plan, stage: Stage, root: Path) -> list[Path]:
    """Copy the stage's plot files out of its folders (those it wrote; a figure it skipped is removed, not left
    from an earlier run). A copy carries its source's modification time, so a run that skips the stage copies
    nothing again. Returns the files published."""
    done = []
    for target, source in figure_files(plan, stage).items():
        dst, src = root / target, root / source
        if not src.is_file():
            dst.unlink(missing_ok=True)
            continue
        st, old = src.stat(), dst.stat() if dst.is_file() else None
        if old is None or (old.st_size, old.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            with atomic_write(dst, "wb") as fh, src.open("rb") as raw:
                shutil.copyfileobj(raw, fh)
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        done.append(target)
    return done


def clear(plan: Plan, stage: Stage, root: Path) -> None:
    """Remove the stage's published plot files: a stage that reruns publishes anew."""
    for target in figure_files(plan, stage):
        (root / target).unlink(missing_ok=True)
