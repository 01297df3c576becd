"""Retraining driven by data: a stage's key hashes the content of what it reads from outside the pipeline (an
imported release folder, a base checkpoint), so a scheduled run reruns exactly the stages that read new data, and
finds everything cached when nothing arrived (components/pipeline/digest.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from components.pipeline.digest import MISSING, DigestCache
from components.pipeline.plan import Plan, build_plan
from components.policies.models import TINY, resolve_model
from components.profile.config import load_config
from tests.conftest import ROOT
from tests.pipeline.test_kinds import _keys


def test_a_digest_follows_content_and_is_kept_by_stat(tmp_path: Path):
    folder = tmp_path / "release"
    (folder / "calc").mkdir(parents=True)
    (folder / "calc" / "train_tasks.jsonl").write_text('{"id": 1}\n')
    cache = DigestCache(tmp_path / "digests.json")
    first = cache.digest(folder)
    assert cache.digest(folder) == first
    cache.save()
    assert DigestCache(tmp_path / "digests.json").digest(folder) == first  # read back from the saved cache

    (folder / "calc" / "train_tasks.jsonl").write_text('{"id": 2}\n')  # same size, new content and mtime
    changed = cache.digest(folder)
    assert changed != first
    (folder / "ehr").mkdir()
    (folder / "ehr" / "train_tasks.jsonl").write_text("")  # a new drop of tasks, even an empty file
    assert cache.digest(folder) not in (first, changed)
    assert cache.digest(tmp_path / "absent") == MISSING

    (tmp_path / "digests.json").write_text("{damaged")  # a damaged cache costs a rehash, never a wrong digest
    assert DigestCache(tmp_path / "digests.json").digest(folder) == cache.digest(folder)


def _plan(tmp_path: Path) -> Plan:
    """The smoke profile on an imported release and a base checkpoint folder, both in tmp_path."""
    raw = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    raw["data"].update(source="medagentgym", import_from=str(tmp_path / "release"))
    raw["training"]["base_model"] = str(tmp_path / "base")
    raw["rollouts"]["base"]["policy"]["options"]["model"] = str(tmp_path / "base")
    raw.setdefault("pipeline", {})["state_dir"] = str(tmp_path / "state")
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(raw))
    return build_plan(load_config(path))


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    (tmp_path / "release" / "medcalcbench").mkdir(parents=True)
    (tmp_path / "release" / "medcalcbench" / "train_tasks.jsonl").write_text('{"id": "a"}\n')
    shutil.copytree(resolve_model(TINY), tmp_path / "base")
    return tmp_path


def test_new_release_data_changes_the_suites_key_and_every_key_after_it(sources: Path):
    plan = _plan(sources)
    before = _keys(plan)
    assert _keys(plan) == before  # nothing new: every stage cached
    assert (sources / "state" / "digests.json").is_file()  # digests are kept beside the pipeline's state

    (sources / "release" / "medcalcbench" / "test_tasks.jsonl").write_text('{"id": "b"}\n')
    after = _keys(plan)
    assert set(after) == set(before) and all(after[s] != before[s] for s in after)  # all read the suite


def test_a_rewritten_base_checkpoint_reruns_the_stages_that_read_it_and_no_other(sources: Path):
    plan = _plan(sources)
    before = _keys(plan)
    weights = next((sources / "base").glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one byte of the weights, rewritten in place under the same name
    weights.write_bytes(bytes(data))
    after = _keys(plan)

    changed = {s for s in after if after[s] != before[s]}
    assert {"base", "sft"} <= changed  # the base model plays `base` and SFT starts from it
    assert "suite" not in changed and "teacher" not in changed  # neither reads the checkpoint
    downstream = {s.name for s in plan.stages if set(s.needs) & changed}
    assert downstream <= changed  # and what reads their outputs follows through its upstream keys

