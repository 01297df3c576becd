"""Collections that play one model on the run's shared vLLM engine run side by side (`pipeline.side_by_side`):
the demo's waves, and a real pipeline run (the CLI, a temporary Prefect server, the real launcher against the fake
`vllm` package of tests/policies/test_vllm.py) whose two collections overlap in time on one engine start, begun
ahead of them while the suite is built."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from components.policies.models import SMOLLM2
from flows.pipeline import load_plan
from tests.pipeline.test_pipeline_smoke import medgym, smoke_profile
from tests.policies.test_vllm import fake, fake_config, recorded  # noqa: F401  (fake is a fixture)


def test_the_demo_runs_each_models_collections_side_by_side_and_nothing_else() -> None:
    plan = load_plan("demo")
    assert plan.cfg.pipeline.side_by_side
    waves = [[s.name for s in wave] for wave in plan.waves(plan.names)]
    # a round's train collection plays the DPO model, as dpo_test and dpo_valid do
    assert [w for w in waves if len(w) > 1] == [["sft_test", "sft_valid", "sft_train"],
                                                ["dpo_test", "dpo_valid", "round1_train"],
                                                ["round1_test", "round1_valid"]]
    assert [n for w in waves for n in w] == plan.names  # every stage once, in run order
    assert ["base"] in waves and ["teacher"] in waves  # the base model's one collection; the scripted teacher

    off = plan.cfg.model_copy(update={"pipeline": plan.cfg.pipeline.model_copy(update={"side_by_side": False})})
    plan_off = type(plan)(cfg=off, stages=plan.stages)
    assert all(len(w) == 1 for w in plan_off.waves(plan.names))
    only = plan.waves(["sft_test", "sft_train", "verifier"])  # `only`: the stages named, still side by side
    assert [[s.name for s in w] for w in only] == [["sft_test", "sft_train"], ["verifier"]]


def _profile(tmp_path: Path, fake: dict[str, Any]) -> Path:  # noqa: F811
    path, raw = smoke_profile(tmp_path)
    options = {k: str(v) if isinstance(v, Path) else v for k, v in fake_config(fake, mode="slow", max_model_len=4096).items()}
    options |= {"tokenizer": SMOLLM2, "concurrency": 2}
    collection = {"policy": {"backend": "vllm", "options": options}, "plan": {"k": 1, "max_new_tokens": 8},
                  "env": {"max_turns": 2}}
    raw["rollouts"] = {"one": {**collection, "split": "test"}, "two": {**collection, "split": "train"}}
    raw["pipeline"] = {**raw["pipeline"], "stages": ["suite", "one", "two"], "side_by_side": True}
    raw.pop("self_improve", None)
    raw["pipeline"].pop("self_improve", None)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_two_collections_of_one_model_overlap_on_one_engine(tmp_path: Path, fake: dict[str, Any]) -> None:  # noqa: F811
    path = _profile(tmp_path, fake)
    proc = medgym(tmp_path, "pipeline", "run", "--profile", str(path))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    records = {s: json.loads((tmp_path / "state" / "smoke" / f"{s}.json").read_text()) for s in ("one", "two")}
    assert all(r["status"] == "done" and r["result"]["episodes"] > 0 for r in records.values())
    spans = {s: (r["started_at"], r["started_at"] + r["wall_s"]) for s, r in records.items()}
    assert spans["one"][0] < spans["two"][1] and spans["two"][0] < spans["one"][1], spans  # at once
    assert len(recorded(fake, "pid")) == 1  # one engine served both
    # started ahead of the first collection (flows.pipeline.engine_ahead): its start overlapped the suite's build
    suite = json.loads((tmp_path / "state" / "smoke" / "suite.json").read_text())
    [engine_started] = recorded(fake, "started")
    assert engine_started < suite["started_at"] + suite["wall_s"] < records["one"]["started_at"]
    prompts = recorded(fake, "/v1/completions")
    assert len(prompts) >= records["one"]["result"]["episodes"] + records["two"]["result"]["episodes"]
    for name in ("one", "two"):  # each collection's episodes in its own folder
        assert list((tmp_path / "data" / "rollouts" / "smoke" / name).rglob("*.jsonl")), name

    again = medgym(tmp_path, "pipeline", "run", "--profile", str(path))  # both hold: cached, nothing run again
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert len(recorded(fake, "pid")) == 1
