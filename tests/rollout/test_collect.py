"""Rollout collection for real: scripted and hf policies in process sandboxes, shards on disk, resume, SIGKILL,
Ray, and the exact-token record of model episodes."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from components.envs.coding_env import EnvConfig
from components.envs.episode import Outcome
from components.policies.registry import PolicyConfig
from components.policies.tokens import ChatTokens, episode_token_ids
from components.rollout.collect import collect
from components.rollout.jobs import SamplingPlan
from components.rollout.runner import CollectionConfig
from components.rollout.store import load_episodes_dir
from components.tasks.record import load_tasks

ROOT = Path(__file__).resolve().parents[2]


def teacher(**kw) -> CollectionConfig:
    base = {"policy": PolicyConfig(backend="scripted", options={"mistake_rate": 0.5}), "plan": SamplingPlan(k=2),
            "split": "train", "workers": 2, "sandbox_backend": "process", "env": EnvConfig(max_turns=8)}
    return CollectionConfig(**{**base, **kw})


def keys(out: Path) -> list[tuple[str, int]]:
    return [(e.task_id, e.sample_index) for e in load_episodes_dir(out)]


def test_teacher_collection_lands_every_episode_once_and_a_rerun_skips_them(small_suite, tmp_path):
    train = [t for t in load_tasks(small_suite) if t.split == "train"]
    out = tmp_path / "rollout"
    first = collect(small_suite, out, teacher())
    assert first.planned == 2 * len(train) and first.failed == 0 and not first.refused
    got = keys(out)
    assert len(got) == len(set(got)) == 2 * len(train)
    assert first.summary["success"] == 1.0
    assert first.summary["teacher_mistakes"] > 0 and first.summary["teacher_repaired"] == first.summary["teacher_mistakes"]
    eps = list(load_episodes_dir(out))
    assert all(e.policy.backend == "scripted" and e.policy.model == "scripted-teacher" for e in eps)
    assert {e.sample_index: e.policy.sampling.temperature for e in eps} == {0: 0.0, 1: 0.6}
    assert all(e.env_time_s > 0 and e.system_prompt for e in eps)

    again = collect(small_suite, out, teacher())
    assert again.planned == 0 and again.skipped == 2 * len(train)
    assert sorted(keys(out)) == sorted(got)


def test_a_rerun_reproduces_the_same_episodes(small_suite, tmp_path):
    a = collect(small_suite, tmp_path / "a", teacher(limit=6))
    b = collect(small_suite, tmp_path / "b", teacher(limit=6, workers=1))
    assert a.planned == b.planned == 12

    def texts(out: Path) -> dict:
        return {(e.task_id, e.sample_index): [t.raw_text for t in e.turns] for e in load_episodes_dir(out)}

    assert texts(tmp_path / "a") == texts(tmp_path / "b")


def test_imported_tasks_are_refused_by_the_teacher_with_the_reason(small_suite, tmp_path):
    rows = [json.loads(line) for line in small_suite.read_text().splitlines()]
    rows[0]["reference_code"] = None
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for sub in ("files",):
        os.symlink(small_suite.parent / sub, tmp_path / sub)
    result = collect(tasks, tmp_path / "out", teacher(split=None, limit=None, plan=SamplingPlan(k=1)))
    assert list(result.refused) == [rows[0]["task_id"]]
    assert "reference solution" in result.refused[rows[0]["task_id"]]
    assert rows[0]["task_id"] not in {k for k, _ in keys(tmp_path / "out")}


def test_a_hand_edited_shard_is_rejected_and_its_episodes_are_collected_again(small_suite, tmp_path):
    out = tmp_path / "rollout"
    collect(small_suite, out, teacher(limit=4))
    shard = next((out / "episodes").glob("shard-*.jsonl"))
    lines = shard.read_text().splitlines()
    row = json.loads(lines[0])
    row["outcome"], row["reward"] = "correct", 1.0
    row["submitted_answer"] = "edited"
    lines[0] = json.dumps(row)
    shard.write_text("\n".join(lines) + "\n")
    again = collect(small_suite, out, teacher(limit=4))
    assert again.rejected_shards == [str(shard)]
    assert (out / "rejected" / shard.name).is_file()
    assert again.planned == 8  # the whole rejected shard is played again
    assert sorted(keys(out)) == sorted(set(keys(out))) and len(keys(out)) == 8


CHILD = """
import sys
from pathlib import Path
from components.envs.coding_env import EnvConfig
from components.policies.registry import PolicyConfig
from components.rollout.collect import collect
from components.rollout.runner import CollectionConfig
from components.rollout.jobs import SamplingPlan
cfg = CollectionConfig(policy=PolicyConfig(backend="scripted", options={"mistake_rate": 0.5}), plan=SamplingPlan(k=4),
                       split="train", workers=2, sandbox_backend="process", env=EnvConfig(max_turns=8), shard_size=5)
collect(Path(sys.argv[1]), Path(sys.argv[2]), cfg)
"""


def committed_lines(out: Path) -> int:
    """A cheap count of committed records while a child writes (the full load validates with GE)."""
    return sum(len(p.read_text().splitlines()) for p in (out / "episodes").glob("shard-*.jsonl")) \
        if (out / "episodes").is_dir() else 0


def test_sigkill_of_the_whole_process_group_loses_only_episodes_in_flight(small_suite, tmp_path):
    out = tmp_path / "rollout"
    expected = 4 * sum(t.split == "train" for t in load_tasks(small_suite))
    rng = random.Random(7)
    seen = 0
    killed_run: list[str] = []
    for _ in range(3):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(small_suite), str(out)], cwd=ROOT,
                                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        target = seen + rng.randint(1, 6)
        while time.monotonic() < deadline and child.poll() is None:  # kill once some new episodes landed
            if committed_lines(out) >= target:
                break
            time.sleep(0.02)
        time.sleep(rng.random() * 0.2)
        assert child.poll() is None, "the collection finished before the kill"
        # the run's zygote (its own session, so the kill does not reach it) and the zygote's sandboxes, named now:
        # other suites' sandboxes on the same machine are none of this test's business
        killed_run += _sandbox_tree(child.pid)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        now = keys(out)
        assert len(now) == len(set(now)), "an episode was written twice"
        assert len(now) >= seen, "a kill lost committed episodes"
        seen = len(now)
        assert not list((out / "rejected").glob("*")) if (out / "rejected").exists() else True
    assert seen < expected, "the kills came too late to test anything"
    final = collect(small_suite, out, teacher(shard_size=5, plan=SamplingPlan(k=4)))
    assert final.skipped == seen and final.planned == expected - seen
    got = keys(out)
    assert len(got) == len(set(got)) == expected
    assert not final.rejected_shards
    # no sandbox process of a killed run is left behind: a killed run's zygote ends its sandboxes, then itself
    assert any("zygote" in p for p in killed_run), f"no killed run had a zygote to check: {killed_run}"
    deadline = time.monotonic() + 30  # a loaded machine tears down a sandbox's memory slowly
    while (left := _alive(killed_run)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left


def _sandbox_tree(pid: int) -> list[str]:
    """"pid start-time: cmdline" of every sandbox process (a zygote, a sandbox) below `pid`."""
    import psutil

    found = []
    for p in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            cmd = " ".join(p.cmdline())
            if re.search(r"medgym-sandbox|runner\.py", cmd):
                found.append(f"{p.pid} {p.create_time()}: {cmd[:120]}")
    return found


def _alive(named: list[str]) -> list[str]:
    """Those of `named` still running: the same pid and start time (a pid may be reused)."""
    import psutil

    left = []
    for entry in named:
        pid, started = entry.split(":")[0].split()
        with contextlib.suppress(psutil.NoSuchProcess):
            p = psutil.Process(int(pid))
            if str(p.create_time()) == started and p.status() != psutil.STATUS_ZOMBIE:
                left.append(entry)
    return left


def test_ray_actors_collect_the_same_episodes_as_local_threads(small_suite, tmp_path):
    pytest.importorskip("ray")
    local = collect(small_suite, tmp_path / "local", teacher(limit=4))
    on_ray = collect(small_suite, tmp_path / "ray", teacher(limit=4, ray_address="local"))
    assert on_ray.planned == local.planned == 8 and on_ray.failed == 0

    def record(out: Path) -> dict:
        return {(e.task_id, e.sample_index): (e.outcome, [t.raw_text for t in e.turns]) for e in load_episodes_dir(out)}

    assert record(tmp_path / "ray") == record(tmp_path / "local")


def hf_config(model: Path, **kw) -> CollectionConfig:
    options = {"model": str(model), "max_context": kw.pop("max_context", 4096)}
    base = {"policy": PolicyConfig(backend="hf", options=options), "plan": SamplingPlan(k=2, max_new_tokens=48),
            "split": "test", "workers": 2, "sandbox_backend": "process", "env": EnvConfig(max_turns=3)}
    return CollectionConfig(**{**base, **kw})


def test_model_episodes_keep_exact_tokens_across_turns(small_suite, tiny_model, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "hf"
    result = collect(small_suite, out, hf_config(tiny_model, limit=4))
    assert result.planned == 8 and result.failed == 0
    chat = ChatTokens(AutoTokenizer.from_pretrained(tiny_model))
    eps = list(load_episodes_dir(out))
    multi = [e for e in eps if len(e.turns) > 1]
    assert multi, "the tiny model's episodes should run several turns"
    for e in eps:
        assert e.policy.backend == "hf" and e.completion_tokens == sum(len(t.response_token_ids) for t in e.turns)
        for prev, turn in zip(e.turns, e.turns[1:], strict=False):
            grown = prev.prompt_token_ids + prev.response_token_ids
            assert turn.prompt_token_ids[: len(grown)] == grown  # the context only grows, by the sampled ids
        tk = episode_token_ids(e, chat)
        last = e.turns[-1]
        assert tk.exact and tk.input_ids[: len(last.prompt_token_ids) + len(last.response_token_ids)] == \
            last.prompt_token_ids + last.response_token_ids
        for t in e.turns:
            assert len(t.response_logprobs) == len(t.response_token_ids) == len(t.loss_mask)
    assert result.summary["completion_tokens"] > 0 and result.summary["model_time_s"] > 0


def test_an_episode_that_would_overflow_the_context_ends_with_its_own_outcome(small_suite, tiny_model, tmp_path):
    prompt_len = max(len(ChatTokens(__import__("transformers").AutoTokenizer.from_pretrained(tiny_model)).start(
        [{"role": "system", "content": "x"}, {"role": "user", "content": t.prompt}])) for t in load_tasks(small_suite))
    out = tmp_path / "hf"
    # room for the first prompt and one reply, not for the second turn
    result = collect(small_suite, out, hf_config(tiny_model, limit=4, max_context=prompt_len + 400,
                                                 plan=SamplingPlan(k=1, max_new_tokens=200),
                                                 env=EnvConfig(max_turns=6)))
    eps = list(load_episodes_dir(out))
    assert result.failed == 0 and len(eps) == 4
    counts = Counter(e.outcome for e in eps)
    assert counts[Outcome.CONTEXT_LIMIT] >= 1, counts
    for e in eps:
        if e.outcome == Outcome.CONTEXT_LIMIT:
            assert "tokens" in e.truncation and e.reward == 0.0
        assert all(len(t.prompt_token_ids) + len(t.response_token_ids) <= prompt_len + 400 for t in e.turns)
