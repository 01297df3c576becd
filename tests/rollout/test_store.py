"""The episode store: atomic shards, resumes that reject damaged shards, and a writer killed at random moments."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.envs.actions import RunCode, SubmitAnswer
from components.envs.episode import Check, Episode, Outcome, PolicyInfo, Turn, record_checksum
from components.rollout.store import (
    EpisodeStore,
    InvalidShardError,
    PacedCommits,
    StoreLocked,
    episode_line,
    load_episodes_dir,
    shard_paths,
)
from components.rollout.validation import read_episode_records, validate_episode_file, validate_episode_shards

ROOT = Path(__file__).resolve().parents[2]
KILL_KEYS = [(f"synthetic_medcalc/bmi/{t}", s) for t in range(100) for s in range(4)]


def make_episode(task_id: str, sample: int, outcome: Outcome | None = None, answer: object = 24.2) -> Episode:
    """A finished episode whose outcome, reward, check and turns agree (the suite checks that they do)."""
    outcome = outcome or (Outcome.CORRECT if sample % 2 == 0 else Outcome.WRONG_ANSWER)
    correct = outcome is Outcome.CORRECT
    submitted = outcome in (Outcome.CORRECT, Outcome.WRONG_ANSWER)
    turns = [] if outcome is Outcome.CONTEXT_LIMIT else [
        Turn(index=0, raw_text='```python\nprint(70 / 1.7**2)\n```', action=RunCode(code="print(70 / 1.7**2)"), observation="24.22"),
        Turn(index=1, raw_text=json.dumps({"type": "submit_answer", "answer": answer}), action=SubmitAnswer(answer=answer),
             observation="correct" if correct else "incorrect"),
    ]
    return Episode(episode_id=f"{task_id}#{sample}", task_id=task_id, sample_index=sample, dataset="synthetic_medcalc",
                   first_observation="Compute the BMI of a 70 kg, 1.70 m patient.", turns=turns, submitted=submitted,
                   submitted_answer=answer if submitted else None,
                   check=Check(correct=correct, grader_reason="24.2 inside [23.0, 25.4]") if submitted else None,
                   reward=1.0 if correct else 0.0, outcome=outcome, policy=PolicyInfo(backend="scripted", model="fixed"),
                   duration_s=0.5)


def batch(keys: list[tuple[str, int]]) -> list[Episode]:
    return [make_episode(t, s) for t, s in keys]


def keys_on_disk(out: Path) -> list[tuple[str, int]]:
    """Every (task_id, sample_index) in DIR/episodes, read raw: a duplicate shows up twice."""
    return [(r["task_id"], r["sample_index"]) for p in shard_paths(out) for r in map(json.loads, p.read_text().splitlines())]


def test_commits_fill_shards_in_order_and_stamp_checksums(tmp_path):
    keys = [(f"t/{i}", 0) for i in range(12)]
    eps = batch(keys)
    with EpisodeStore(tmp_path, shard_size=4) as store:
        pos = 0
        for n in (1, 3, 2, 5, 0, 1):  # across both shard boundaries, one call spanning two
            assert store.commit(eps[pos:pos + n]) == n
            pos += n
        assert store.done_keys() == set(keys) and store.committed == 12
        assert [e.episode_id for e in store.episodes()] == [e.episode_id for e in eps]
    paths = shard_paths(tmp_path)
    assert [p.name for p in paths] == ["shard-00000.jsonl", "shard-00001.jsonl", "shard-00002.jsonl"]
    for p in paths:
        rows = [json.loads(line) for line in p.read_text().splitlines()]
        assert len(rows) == 4
        assert all(r["checksum"] == record_checksum(Episode.model_validate(r)) for r in rows)
    assert all(r.success for r in validate_episode_shards([(p, read_episode_records(p)) for p in paths]))
    assert all(e.checksum is None for e in eps)  # the caller's objects are not changed
    assert not [p for p in (tmp_path / "episodes").iterdir() if p.name.endswith(".tmp")]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["episodes"] == 12 and manifest["shards"] == {p.name: 4 for p in paths}
    assert keys_on_disk(tmp_path) == keys


def test_a_resume_keeps_the_done_keys_and_starts_a_new_shard(tmp_path):
    with EpisodeStore(tmp_path, shard_size=4) as store:
        store.commit(batch([(f"t/{i}", 0) for i in range(6)]))  # shard 1 is left half full
    half = (tmp_path / "episodes" / "shard-00001.jsonl").read_bytes()
    with EpisodeStore(tmp_path, shard_size=4) as store:
        assert store.done_keys() == {(f"t/{i}", 0) for i in range(6)} and not store.rejected()
        store.commit(batch([("t/6", 0)]))
        assert store.committed == 7
    assert (tmp_path / "episodes" / "shard-00001.jsonl").read_bytes() == half  # an old run's shard is never rewritten
    assert [p.name for p in shard_paths(tmp_path)][-1] == "shard-00002.jsonl"
    assert len(load_episodes_dir(tmp_path).episodes) == 7


def test_commit_refuses_repeats_and_records_the_suite_would_reject(tmp_path):
    with EpisodeStore(tmp_path, shard_size=4) as store:
        store.commit(batch([("t/0", 0), ("t/1", 0)]))
        before = (tmp_path / "episodes" / "shard-00000.jsonl").read_bytes()
        with pytest.raises(ValueError, match="already committed"):
            store.commit(batch([("t/2", 0), ("t/0", 0)]))
        with pytest.raises(ValueError, match="repeated"):
            store.commit(batch([("t/3", 0), ("t/3", 0)]))
        running = make_episode("t/4", 0).model_copy(update={"outcome": None})
        with pytest.raises(ValueError, match="missing_required: outcome"):
            store.commit([make_episode("t/5", 0), running])
        partial = make_episode("t/6", 0).model_copy(update={"reward": 0.5})  # correct with reward 0.5
        with pytest.raises(ValueError, match="reward_problem: reward 0.5 with outcome 'correct'"):
            store.commit([partial])
        with pytest.raises(ValueError, match="already committed"):  # another key under a used episode_id
            store.commit([make_episode("t/7", 0).model_copy(update={"episode_id": "t/0#0"})])
        assert store.done_keys() == {("t/0", 0), ("t/1", 0)}
        assert (tmp_path / "episodes" / "shard-00000.jsonl").read_bytes() == before
        store.commit(batch([("t/2", 0)]))
    assert store.committed == 3 and len(keys_on_disk(tmp_path)) == 3


def test_only_one_writer_per_folder(tmp_path):
    store = EpisodeStore(tmp_path)
    with pytest.raises(StoreLocked):
        EpisodeStore(tmp_path)
    store.close()
    with EpisodeStore(tmp_path) as again:
        assert again.committed == 0


def _edit_line(path: Path, lineno: int, **changes: object) -> None:
    lines = path.read_text().splitlines(keepends=True)
    row = json.loads(lines[lineno - 1])
    row.update(changes)
    lines[lineno - 1] = json.dumps(row) + "\n"
    path.write_text("".join(lines))


def _torn(path: Path) -> None:
    text = path.read_text()
    path.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])  # the last line cut halfway, no newline


def _bad_json(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = '{"episode_id": "t/1#0", "task_id": \n'
    path.write_text("".join(lines))


CORRUPTIONS = {
    # name: (damage shard 0, the failing expectation's description, its column, the line it names)
    "torn last line": (_torn, "each line is a JSON object", "json_problem", 3),
    "invalid JSON": (_bad_json, "each line is a JSON object", "json_problem", 2),
    "changed answer": (lambda p: _edit_line(p, 2, submitted_answer=31.0), "checksum equals row_checksum(row)", "checksum_problem", 2),
    "flipped outcome and reward": (lambda p: _edit_line(p, 2, outcome="correct", reward=1.0,
                                                        check={"correct": True, "grader_reason": "edited"}),
                                   "checksum equals row_checksum(row)", "checksum_problem", 2),
    "unknown field": (lambda p: _edit_line(p, 1, grade="A"), "the row validates as an Episode", "schema_problem", 1),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_a_damaged_shard_is_reported_moved_aside_and_collected_again(tmp_path, case, caplog):
    damage, description, column, line = CORRUPTIONS[case]
    keys = [(f"t/{i}", 0) for i in range(6)]
    with EpisodeStore(tmp_path, shard_size=3) as store:
        store.commit(batch(keys))
    shard0 = tmp_path / "episodes" / "shard-00000.jsonl"
    damage(shard0)

    # read-only first: a downstream stage skips it (or raises) and leaves it where it is
    loaded = load_episodes_dir(tmp_path)
    assert [e.task_id for e in loaded.episodes] == ["t/3", "t/4", "t/5"]
    assert [r.path for r in loaded.invalid] == [shard0] and shard0.exists()
    if case == "torn last line":  # strict: a downstream stage that would rather stop
        with pytest.raises(InvalidShardError, match=str(shard0)):
            load_episodes_dir(tmp_path, strict=True)

    with EpisodeStore(tmp_path, shard_size=3) as store:
        (rejected,) = store.rejected()
        report = rejected.report
        assert rejected.path == shard0 and str(rejected) == str(shard0) and rejected.moved_to == tmp_path / "rejected" / "shard-00000.jsonl"
        assert report.path == str(shard0) and not report.success
        failure = next(f for f in report.failures if f.description == description)
        assert failure.column == column and failure.unexpected[0].startswith(f"line {line}:")
        assert str(shard0) in caplog.text and description in caplog.text
        assert not shard0.exists() and rejected.moved_to.exists()
        assert store.done_keys() == set(keys[3:])
        missing = [k for k in keys if k not in store.done_keys()]
        store.commit(batch(missing))  # collected again, into a new shard
        assert store.done_keys() == set(keys)
    assert [p.name for p in shard_paths(tmp_path)] == ["shard-00001.jsonl", "shard-00002.jsonl"]
    assert sorted(keys_on_disk(tmp_path)) == sorted(keys)
    assert sorted((e.task_id, e.sample_index) for e in load_episodes_dir(tmp_path)) == sorted(keys)  # it iterates as its episodes
    with EpisodeStore(tmp_path, shard_size=3) as store:  # the rejected copy stays out of everything
        assert not store.rejected() and store.committed == 6
        store.commit(batch([("t/9", 0)]))
    assert shard_paths(tmp_path)[-1].name == "shard-00003.jsonl"  # shard 0's number is not reused either


REWARD_RULE = "reward == 1 exactly when outcome is correct (DiagGym: reward == diag.reward.total, diag.correct as the outcome)"


def test_the_suite_names_each_broken_rule_and_its_lines(tmp_path):
    rows = [json.loads(episode_line(make_episode(f"t/{i}", 0))) for i in range(3)]
    rows.append(dict(rows[0]))  # line 4: the episode_id and the key of line 1 again
    rows.append({**rows[1], "episode_id": "x#1", "task_id": "x", "reward": 1.5, "outcome": "lucky", "schema_version": 2})
    rows.append({**rows[2], "episode_id": "y#1", "task_id": "y", "turns": [], "checksum": None})
    rows.append({**json.loads(episode_line(make_episode("w", 1))), "reward": 1.0})  # wrong_answer paid 1, checksum stale
    rows.append(json.loads(episode_line(make_episode("z", 0, outcome=Outcome.CONTEXT_LIMIT))))  # no turns is fine here
    path = tmp_path / "shard-00000.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{\"episode_id\": \"torn\n")
    (report,) = validate_episode_shards([(path, read_episode_records(path))])
    failed = {f.description: f for f in report.failures}
    assert set(failed) == {
        "each line is a JSON object", "episode_id is unique", "(task_id, sample_index) is unique", "outcome is an Outcome",
        "a coding episode's reward is in [0, 1]", "schema_version is one of [3, 4]", "a finished episode has turns (unless context_limit)",
        "episode_id, task_id, sample_index, outcome, reward, schema_version, checksum are not null",
        "the row validates as an Episode", "checksum equals row_checksum(row)", REWARD_RULE,
    }, report.summary()
    assert report.rows == 9 and report.path == str(path)
    assert failed["each line is a JSON object"].unexpected[0].startswith("line 9: 'not valid JSON")
    assert [u.split(":")[0] for u in failed["episode_id is unique"].unexpected] == ["line 1", "line 4"]
    assert failed["(task_id, sample_index) is unique"].column == "task_id,sample_index"
    assert failed["a coding episode's reward is in [0, 1]"].unexpected == ["line 5: 1.5"]
    assert failed["schema_version is one of [3, 4]"].unexpected == ["line 5: 2"]
    assert failed["the row validates as an Episode"].unexpected[0].startswith("line 5: \"field 'outcome'")
    assert failed["a finished episode has turns (unless context_limit)"].unexpected == ["line 6: \"outcome 'correct' with no turns\""]
    assert failed[REWARD_RULE].unexpected == ["line 7: \"reward 1 with outcome 'wrong_answer'\""]
    assert [u.split(":")[0] for u in failed["checksum equals row_checksum(row)"].unexpected] == ["line 7"]  # 5 is no Episode
    assert failed["episode_id, task_id, sample_index, outcome, reward, schema_version, checksum are not null"].unexpected == [
        "line 6: 'checksum'"]
    # one GE run for several shards still judges each alone: the same ids in two shards are no failure of either
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    again = [(p, read_episode_records(p)) for p in (good, path, good)]
    first, bad, second = validate_episode_shards(again)
    assert first.success and second.success and bad.failures == report.failures
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert validate_episode_file(empty).failures[0].expectation == "non-empty file"


def test_leftover_temp_files_are_removed(tmp_path):
    with EpisodeStore(tmp_path, shard_size=2) as store:
        store.commit(batch([("t/0", 0), ("t/1", 0), ("t/2", 0)]))
    episodes_dir = tmp_path / "episodes"
    leftovers = [episodes_dir / ".shard-00002.jsonl.k1ll3d.tmp", episodes_dir / ".shard-00001.jsonl.x9.tmp",
                 tmp_path / ".manifest.json.ab12.tmp"]
    for p in leftovers:
        p.write_text('{"episode_id": "t/3#0", "tas')
    (episodes_dir / "notes.txt").write_text("not ours")
    with EpisodeStore(tmp_path, shard_size=2) as store:
        assert not any(p.exists() for p in leftovers) and (episodes_dir / "notes.txt").exists()
        assert store.committed == 3 and not store.rejected()
        store.commit(batch([("t/3", 0)]))
    assert [p.name for p in shard_paths(tmp_path)] == ["shard-00000.jsonl", "shard-00001.jsonl", "shard-00002.jsonl"]


def test_a_key_in_two_valid_shards_keeps_the_first(tmp_path):
    episodes_dir = tmp_path / "episodes"
    episodes_dir.mkdir()
    first, second = make_episode("t/0", 0, answer=24.2), make_episode("t/0", 0, answer=24.3)
    (episodes_dir / "shard-00000.jsonl").write_text(episode_line(first) + episode_line(make_episode("t/1", 0)))
    (episodes_dir / "shard-00001.jsonl").write_text(episode_line(second))  # valid on its own: GE sees one shard at a time
    with EpisodeStore(tmp_path) as store:
        (dup,) = store.duplicates
        assert dup.key == ("t/0", 0) and dup.kept.endswith("shard-00000.jsonl:1") and dup.dropped.endswith("shard-00001.jsonl:1")
        assert [(e.task_id, e.submitted_answer) for e in store.episodes()] == [("t/0", 24.2), ("t/1", 24.2)]
        assert store.committed == 2 and not store.rejected()
    loaded = load_episodes_dir(tmp_path)
    assert [(e.task_id, e.submitted_answer) for e in loaded.episodes] == [("t/0", 24.2), ("t/1", 24.2)]
    assert len(loaded.duplicates) == 1


def test_many_commits_and_reopens_never_duplicate(tmp_path):
    rng = random.Random(7)
    keys = [(f"t/{i}", s) for i in range(25) for s in range(2)]
    todo, sessions = list(keys), 0
    while todo:
        with EpisodeStore(tmp_path, shard_size=5) as store:
            sessions += 1
            for _ in range(rng.randint(5, 12)):
                n = rng.randint(1, 4)
                store.commit(batch(todo[:n]))
                todo = todo[n:]
            with pytest.raises(ValueError, match="already committed"):  # a scheduler bug cannot make a duplicate
                store.commit(batch([keys[0]]))
    on_disk = keys_on_disk(tmp_path)
    assert sessions >= 3 and len(on_disk) == len(set(on_disk)) == len(keys) and set(on_disk) == set(keys)
    assert all(r.success for r in validate_episode_shards([(p, read_episode_records(p)) for p in shard_paths(tmp_path)]))


CHILD = """
import random, sys
from components.rollout.store import EpisodeStore
from tests.rollout.test_store import KILL_KEYS, batch
rng = random.Random(int(sys.argv[2]))
with EpisodeStore(sys.argv[1], shard_size=8) as store:
    todo = [k for k in KILL_KEYS if k not in store.done_keys()]
    print("open", store.committed, flush=True)
    while todo:
        n = rng.randint(1, 5)
        store.commit(batch(todo[:n]))
        todo = todo[n:]
        print("committed", store.committed, flush=True)  # only after commit returned: this many are durable
"""


def _run_and_kill(out: Path, seed: int, after_commits: int, delay: float) -> int:
    """Run the writer and SIGKILL it `delay` s after it reported `after_commits` commits (counting them, not
    seconds, keeps the moment among the commits on a fast machine or a slow one); the highest count it said was
    durable."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(out), str(seed)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    lines: list[str] = []
    while (line := proc.stdout.readline()) and sum(w.startswith("committed") for w in lines) < after_commits:
        lines.append(line)
    assert line, f"the writer died before its commit {after_commits}: {proc.communicate()[1]}"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"it finished before the kill, make KILL_KEYS longer: {err}"
    # only whole lines: unbuffered (PYTHONUNBUFFERED), print writes "committed", " " and the count one by one, and
    # a kill between them leaves a line with no count, which acknowledges nothing
    said = [*lines, line, *rest.splitlines(keepends=True)]
    return max(int(w.split()[1]) for w in said if w.endswith("\n") and len(w.split()) == 2)


def test_a_writer_killed_at_random_moments_loses_nothing_it_committed(tmp_path):
    rng = random.Random(2024)
    committed = 0
    for round_ in range(4):
        acked = _run_and_kill(tmp_path, seed=round_, after_commits=rng.randint(1, 15), delay=rng.uniform(0.0, 0.02))
        for report in validate_episode_shards([(p, read_episode_records(p)) for p in shard_paths(tmp_path)]):
            assert report.success, report.summary()
        on_disk = keys_on_disk(tmp_path)
        assert len(on_disk) == len(set(on_disk)), f"round {round_}: a duplicate key"
        with EpisodeStore(tmp_path, shard_size=8) as store:  # the resume: nothing to reject, temps cleaned
            assert not store.rejected() and not (tmp_path / "rejected").exists()
            assert not [p for p in (tmp_path / "episodes").iterdir() if p.name.endswith(".tmp")]
            assert store.committed >= max(committed, acked), f"round {round_}: {store.committed} < {committed} or {acked}"
            assert store.committed > committed  # each run got somewhere: the kills land among commits
            committed = store.committed
    with EpisodeStore(tmp_path, shard_size=8) as store:  # the last resume finishes the work
        store.commit(batch([k for k in KILL_KEYS if k not in store.done_keys()]))
    assert sorted(keys_on_disk(tmp_path)) == sorted(KILL_KEYS)  # every key exactly once
    assert len(load_episodes_dir(tmp_path)) == len(KILL_KEYS)


def test_diaggym_episodes_are_stored_with_their_own_reward_rule(tmp_path):
    """A DiagGym reward is its parts' total (above 1 for a right diagnosis with the key exams); the store keeps such
    an episode, and still refuses one whose reward or verdict disagrees with its recorded outcome."""
    from components.envs.episode import DiagOutcome, ExamScore, RewardParts

    def diag_episode(key: str, reward: float, correct: bool = True) -> Episode:
        ep = make_episode(key, 0, outcome=Outcome.CORRECT if correct else Outcome.WRONG_ANSWER)
        parts = RewardParts(accuracy=1.0, exam_f1=0.5, turn_penalty=-0.04, total=1.46)
        exams = ExamScore(precision=1.0, recall=1.0, f1=1.0, ordered=2, key=2, hits=2)
        return ep.model_copy(update={"reward": reward, "diag": DiagOutcome(
            diagnosis="x", correct=True, exams_ordered=["a", "b"], exams=exams, turns=2, well_formed=True, reward=parts)})

    with EpisodeStore(tmp_path) as store:
        store.commit([diag_episode("case/1", 1.46)])
        for bad, why in ((diag_episode("case/2", 1.0), "is not diag.reward.total"),
                         (diag_episode("case/3", 1.46, correct=False), "diag.correct True with outcome 'wrong_answer'")):
            with pytest.raises(ValueError, match=why):
                store.commit([bad])
    (report,) = validate_episode_shards([(p, read_episode_records(p)) for p in shard_paths(tmp_path)])
    assert report.success, report.summary()
    assert [e.diag.reward.total for e in load_episodes_dir(tmp_path, strict=True)] == [1.46]


def test_paced_commits_batch_finished_episodes_and_a_timer_commits_what_waits(tmp_path):
    heard: list[list[tuple[str, int]]] = []
    with EpisodeStore(tmp_path, shard_size=64) as store, \
            PacedCommits(store, every_s=2.0, on_commit=lambda eps: heard.append([(e.task_id, e.sample_index) for e in eps])) as commit:
        commit(batch([("t/0", 0)]))  # nothing committed yet: the first batch goes at once
        assert keys_on_disk(tmp_path) == [("t/0", 0)]
        commit(batch([("t/1", 0)]))
        commit(batch([("t/2", 0), ("t/3", 0)]))
        assert keys_on_disk(tmp_path) == [("t/0", 0)]  # within every_s of the last commit: they wait
        deadline = time.monotonic() + 10
        while len(keys_on_disk(tmp_path)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert keys_on_disk(tmp_path) == [("t/0", 0), ("t/1", 0), ("t/2", 0), ("t/3", 0)]  # the timer took them
        assert heard == [[("t/0", 0)], [("t/1", 0), ("t/2", 0), ("t/3", 0)]]  # told once each was durable
        commit(batch([("t/4", 0)]))
    assert keys_on_disk(tmp_path)[-1] == ("t/4", 0)  # the block's end commits what waits


def test_paced_commits_go_at_once_for_a_shards_worth_or_every_s_zero(tmp_path):
    with EpisodeStore(tmp_path / "a", shard_size=3) as store, PacedCommits(store, every_s=3600) as commit:
        commit(batch([("t/0", 0)]))
        commit(batch([("t/1", 0), ("t/2", 0)]))
        assert len(keys_on_disk(tmp_path / "a")) == 1
        commit(batch([("t/3", 0)]))  # three wait: a shard's worth
        assert len(keys_on_disk(tmp_path / "a")) == 4
    with EpisodeStore(tmp_path / "b") as store, PacedCommits(store, every_s=0) as commit:
        for i in range(3):
            commit(batch([(f"t/{i}", 0)]))
            assert len(keys_on_disk(tmp_path / "b")) == i + 1


def test_paced_commits_keep_finished_episodes_when_the_block_fails(tmp_path):
    with pytest.raises(KeyboardInterrupt), EpisodeStore(tmp_path) as store, PacedCommits(store, every_s=3600) as commit:
        commit(batch([("t/0", 0)]))
        commit(batch([("t/1", 0)]))
        raise KeyboardInterrupt
    assert keys_on_disk(tmp_path) == [("t/0", 0), ("t/1", 0)]


def test_a_commit_that_fails_on_the_timer_is_raised_to_the_caller(tmp_path):
    with EpisodeStore(tmp_path) as store:
        commit = PacedCommits(store, every_s=0.2)
        commit(batch([("t/0", 0)]))
        commit(batch([("t/0", 0)]))  # a repeat: the store refuses it when the timer commits it
        time.sleep(0.6)
        with pytest.raises(ValueError, match="already committed"):
            commit(batch([("t/1", 0)]))
    assert keys_on_disk(tmp_path) == [("t/0", 0)]
