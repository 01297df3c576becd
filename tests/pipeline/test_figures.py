"""What DVC's plots read: file outs of their own, never a file inside a folder out (components/pipeline/figures.py).
The DVC side (an experiment beside checked-in pipelines never run here) is tests/test_dvc.py."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from components.pipeline.dvc import dvc_file, dvc_stages
from components.pipeline.figures import figure_files, publish
from components.pipeline.plan import build_plan
from components.profile.config import CONFIG_DIR, load_config
from tests.conftest import ROOT


def _plot_files(doc: dict, wdir: str) -> set[str]:
    files: set[str] = set()
    for plot in doc.get("plots", []):
        if isinstance(plot, str):
            files.add(plot)
        else:
            (definition,) = plot.values()
            files |= set(definition["y"])
    return {str(PurePosixPath(f).relative_to(wdir)) if wdir else f for f in files}


@pytest.mark.parametrize("profile", ["demo", "diag-demo", "smoke"])
def test_every_plot_reads_a_file_out_of_its_own(profile: str) -> None:
    cfg = load_config(profile)
    plan = build_plan(cfg)
    doc = dvc_stages(plan, CONFIG_DIR / f"{profile}.yaml", ROOT)
    outs = [next(iter(out)) for body in doc["stages"].values() for out in body["outs"]]
    wdir = "/".join([".."] * (len(dvc_file(cfg).parts) - 1))
    plotted = _plot_files(doc, wdir)
    assert plotted, f"{profile} declares no plots"
    for path in plotted:
        assert path in outs, f"{path} is no out of its own"
        inside = [o for o in outs if o != path and PurePosixPath(path).is_relative_to(o)]
        assert not inside, f"{path} lies inside the folder out {inside}"


def test_publish_copies_what_the_stage_wrote_and_drops_what_it_did_not(tmp_path: Path) -> None:
    plan = build_plan(load_config("demo"))
    evaluate = next(s for s in plan.stages if s.name == "evaluate")
    files = figure_files(plan, evaluate)
    assert {p.name for p in files} == {"success.png", "success_by_domain.png", "taxonomy.png", "success.json"}
    sources = list(files.values())
    for i, source in enumerate(sources):
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / source).write_bytes(bytes([i]) * 10)
    assert set(publish(plan, evaluate, tmp_path)) == set(files)
    for target, source in files.items():
        assert (tmp_path / target).read_bytes() == (tmp_path / source).read_bytes()
    inodes = {t: (tmp_path / t).stat().st_ino for t in files}
    assert set(publish(plan, evaluate, tmp_path)) == set(files)  # a skipped stage: nothing is copied again
    assert {t: (tmp_path / t).stat().st_ino for t in files} == inodes

    (tmp_path / sources[0]).unlink()  # a rerun that drew no such figure: its old copy goes too
    (tmp_path / sources[1]).write_bytes(b"new")
    published = publish(plan, evaluate, tmp_path)
    gone = next(t for t, s in files.items() if s == sources[0])
    assert gone not in published and not (tmp_path / gone).exists()
    assert (tmp_path / next(t for t, s in files.items() if s == sources[1])).read_bytes() == b"new"
    assert not list((tmp_path / gone.parent).glob(".*.tmp"))  # no half-written copy left
