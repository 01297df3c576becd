"""Where rollout episodes land: DIR/episodes/shard-NNNNN.jsonl, written so that a kill at any moment loses at most
what was not yet committed, and never leaves half a file or an episode twice.

Each `commit` rewrites the open shard whole through a temp file and os.replace, until it holds `shard_size`
episodes; then the next shard starts. Collections commit through `PacedCommits`, in batches a few seconds apart.
Before a shard is written its new content passes the same suite a resume applies (components.rollout.validation),
so what the store writes it will accept again.

A store opened on an existing DIR is a resume: every shard is validated; one that fails is moved to
DIR/rejected/ (one rename, so it is in exactly one of the two folders at every moment) and its episodes count as
not collected. A resume never writes into an old shard: it starts after the highest shard number ever used
(rejected ones included, so a rejected name is never reused). The shards are the truth; manifest.json is a
summary for people.

One writer per DIR: the store holds an exclusive flock on DIR/.lock (the kernel drops it when the process
dies, so a killed run never blocks its resume). Two writers would pick the same next shard number and replace
each other's shard. Readers (`load_episodes_dir`) take no lock: they only ever see whole shards.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from components.common.io import RecordError, atomic_write
from components.envs.episode import Episode, record_checksum
from components.rollout.validation import EpisodeValidationReport, Record, read_episode_records, row_problems, validate_episode_shards

log = logging.getLogger(__name__)

SHARD_SIZE = 64
COMMIT_EVERY_S = 2.0  # PacedCommits: the longest a finished episode waits to be committed
EPISODES, REJECTED, MANIFEST, LOCK = "episodes", "rejected", "manifest.json", ".lock"
_SHARD = re.compile(r"^shard-(\d{5,})\.jsonl$")
# any name that carries a shard number: shards, rejected copies (".1" when a name was taken), atomic_write temps
_NUMBERED = re.compile(r"^\.?shard-(\d{5,})\.jsonl")
# atomic_write's temp files: ".<target>.<random>.tmp" beside the target
_TEMP = re.compile(r"^\.(?:shard-\d{5,}\.jsonl|manifest\.json)\..+\.tmp$")

Key = tuple[str, int]


class StoreLocked(RuntimeError):
    """Another EpisodeStore (in this process or another) has DIR open for writing."""


class InvalidShardError(ValueError):
    """load_episodes_dir(strict=True) met a shard that fails validation."""

    def __init__(self, reports: list[EpisodeValidationReport]):
        self.reports = reports
        super().__init__("; ".join(r.summary() for r in reports))


@dataclass(frozen=True)
class RejectedShard:
    path: Path  # where the shard was
    moved_to: Path | None  # DIR/rejected/<name>; None where a read-only loader skipped it in place
    report: EpisodeValidationReport  # the failing expectations, their columns and lines

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class DuplicateKey:
    """The same (task_id, sample_index) in two places: the first is kept, this one is ignored."""

    key: Key
    kept: str  # "<path>:<line>"
    dropped: str


@dataclass
class _Shard:
    path: Path
    lines: list[str] = field(default_factory=list)  # only for this run's open shard: what it holds on disk
    episodes: int = 0  # the shard's episodes this store counts (a duplicate key is not counted twice)


def shard_name(number: int) -> str:
    return f"shard-{number:05d}.jsonl"


def shard_paths(out_dir: Path | str) -> list[Path]:
    """DIR/episodes' shards in shard-number order (which is commit order)."""
    folder = Path(out_dir) / EPISODES
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _SHARD.match(p.name)) and p.is_file()] if folder.is_dir() else []
    return [p for _, p in sorted(found)]


def episode_line(episode: Episode) -> str:
    """The record as a shard stores it: its JSON with the checksum set (the caller's object is left as it is)."""
    body = episode.model_dump(mode="json")
    body["checksum"] = record_checksum(episode)
    return json.dumps(body, ensure_ascii=False) + "\n"


def _key(obj: dict[str, Any]) -> Key:
    return str(obj["task_id"]), int(obj["sample_index"])


class _Index:
    """Keys of the valid shards in order, the first place each was seen, and the later repeats to skip."""

    def __init__(self) -> None:
        self.first: dict[Key, str] = {}
        self.ids: set[str] = set()  # episode_ids: a shard with one twice fails the suite, so commit refuses it
        self.skip: set[tuple[Path, int]] = set()
        self.duplicates: list[DuplicateKey] = []

    def add(self, path: Path, records: list[Record]) -> int:
        """Index a valid shard's records; returns how many are new."""
        new = 0
        for lineno, obj in records:
            if isinstance(obj, RecordError):  # a valid shard has none
                raise obj
            key, where = _key(obj), f"{path}:{lineno}"
            if key in self.first:
                self.skip.add((path, lineno))
                self.duplicates.append(DuplicateKey(key=key, kept=self.first[key], dropped=where))
                log.warning("episode %s at %s is already at %s: keeping the first", key, where, self.first[key])
                continue
            self.first[key] = where
            self.ids.add(str(obj["episode_id"]))
            new += 1
        return new


VALIDATE_CHUNK = 16  # shards per GE run: one run's cost is nearly fixed, and a chunk's records are held in memory


def _validated(paths: list[Path]) -> Iterator[tuple[Path, list[Record], EpisodeValidationReport]]:
    """Each shard with its records and report, in order; a shard gone meanwhile (a resume rejected it) is skipped."""
    for start in range(0, len(paths), VALIDATE_CHUNK):
        chunk = []
        for path in paths[start:start + VALIDATE_CHUNK]:
            try:
                chunk.append((path, read_episode_records(path)))
            except FileNotFoundError:
                log.info("%s is gone (moved to rejected by a resume)", path)
        for (path, records), report in zip(chunk, validate_episode_shards(chunk), strict=True):
            yield path, records, report


class EpisodeStore:
    """The rollout's output folder, open for writing. Use as a context manager (or call close) to free DIR."""

    def __init__(self, out_dir: Path | str, shard_size: int = SHARD_SIZE) -> None:
        if shard_size < 1:
            raise ValueError(f"shard_size must be at least 1, got {shard_size}")
        self.out_dir, self.shard_size = Path(out_dir), shard_size
        self.episodes_dir, self.rejected_dir = self.out_dir / EPISODES, self.out_dir / REJECTED
        self.episodes_dir.mkdir(parents=True, exist_ok=True)
        self._lock: IO[str] | None = self._acquire()
        try:
            self._clean_temps()
            self._rejected: list[RejectedShard] = []
            self._index = _Index()
            self._shards: list[_Shard] = []
            for path, records, report in _validated(shard_paths(self.out_dir)):
                if report.success:
                    self._shards.append(_Shard(path=path, episodes=self._index.add(path, records)))
                else:
                    self._reject(path, report)
            self._next = self._highest_number() + 1
            self._open: _Shard | None = None  # this run's shard still filling; None until the first commit
            self._write_manifest()
        except BaseException:
            self.close()
            raise

    # ---- lifecycle
    def _acquire(self) -> IO[str]:
        fh = open(self.out_dir / LOCK, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the store's lifetime
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise StoreLocked(f"{self.out_dir} is open in another EpisodeStore (one writer per rollout folder)") from None
        return fh

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the descriptor drops the flock
            self._lock = None

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # ---- resume
    def _clean_temps(self) -> None:
        # safe only under the lock: no live writer can own these
        for folder in (self.out_dir, self.episodes_dir):
            for p in folder.iterdir():
                if _TEMP.match(p.name) and p.is_file():
                    log.info("removing %s, left by a run that was killed mid-write", p)
                    with contextlib.suppress(FileNotFoundError):
                        p.unlink()

    def _reject(self, path: Path, report: EpisodeValidationReport) -> None:
        self.rejected_dir.mkdir(exist_ok=True)
        target, n = self.rejected_dir / path.name, 0
        while target.exists():  # keep every rejected copy: they are evidence
            n += 1
            target = self.rejected_dir / f"{path.name}.{n}"
        os.rename(path, target)  # same filesystem: atomic, the shard is in one folder or the other
        self._rejected.append(RejectedShard(path=path, moved_to=target, report=report))
        log.warning("rejected shard moved to %s; its episodes will be collected again: %s", target, report.summary())

    def _highest_number(self) -> int:
        names = [p.name for folder in (self.episodes_dir, self.rejected_dir) if folder.is_dir() for p in folder.iterdir()]
        return max((int(m.group(1)) for n in names if (m := _NUMBERED.match(n))), default=-1)

    # ---- reading
    def done_keys(self) -> set[Key]:
        """(task_id, sample_index) of every episode in a valid shard: the work a resume must not redo."""
        return set(self._index.first)

    @property
    def committed(self) -> int:
        return len(self._index.first)

    def episodes(self) -> Iterator[Episode]:
        """The valid episodes, in commit order (duplicates skipped), read from the shards."""
        for shard in self._shards:
            for lineno, obj in read_episode_records(shard.path):
                if (shard.path, lineno) in self._index.skip:
                    continue
                if isinstance(obj, RecordError):  # changed on disk after it was validated
                    raise obj
                yield Episode.model_validate(obj)

    def rejected(self) -> list[RejectedShard]:
        """The shards this resume moved to DIR/rejected, each with its report."""
        return list(self._rejected)

    @property
    def duplicates(self) -> list[DuplicateKey]:
        return list(self._index.duplicates)

    # ---- writing
    def commit(self, episodes: Iterable[Episode]) -> int:
        """Make finished episodes durable; returns how many were written.

        All or nothing per call unless the batch crosses a shard boundary, where each shard's part is its own
        atomic write (a kill between them keeps the first part; every episode is whole in one place or absent).
        A repeated key, or a record the suite would reject, raises ValueError before anything is written.
        """
        if self._lock is None:
            raise ValueError("the store is closed")
        batch = list(episodes)
        keys, ids = Counter((e.task_id, e.sample_index) for e in batch), Counter(e.episode_id for e in batch)
        repeated = [str(k) for k, n in keys.items() if n > 1 or k in self._index.first]
        repeated += [i for i, n in ids.items() if n > 1 or i in self._index.ids]
        if repeated:
            raise ValueError(f"already committed or repeated in this batch: {sorted(repeated)[:5]}")
        # what the store writes it must accept on a resume: the suite's row rules, checked on the very lines to be
        # written, before any file changes (uniqueness is the key check above)
        lines = [episode_line(e) for e in batch]
        bad = [f"{e.episode_id}: {'; '.join(p)}" for e, line in zip(batch, lines, strict=True) if (p := row_problems(json.loads(line)))]
        if bad:
            raise ValueError(f"refusing to write records the shard suite rejects: {' | '.join(bad[:5])}")
        writes: list[tuple[_Shard, list[str]]] = []
        if self._open is not None and len(self._open.lines) < self.shard_size:
            writes.append((self._open, list(self._open.lines)))
        number = self._next
        for line in lines:
            if not writes or len(writes[-1][1]) >= self.shard_size:
                writes.append((_Shard(path=self.episodes_dir / shard_name(number)), []))
                number += 1
            writes[-1][1].append(line)
        writes = [(shard, content) for shard, content in writes if len(content) > len(shard.lines)]
        for shard, content in writes:
            with atomic_write(shard.path) as fh:
                fh.write("".join(content))
            if shard is not self._open:
                self._next += 1
                self._shards.append(shard)
                self._open = shard
            start, shard.lines = len(shard.lines), content
            shard.episodes = len(content)
            self._index.add(shard.path, [(i, json.loads(s)) for i, s in enumerate(content[start:], start=start + 1)])
        if writes:
            self._write_manifest()
        return len(batch)

    def _write_manifest(self) -> None:
        rejected = sorted(p.name for p in self.rejected_dir.iterdir()) if self.rejected_dir.is_dir() else []
        body = {"shard_size": self.shard_size, "episodes": self.committed, "shards": {s.path.name: s.episodes for s in self._shards},
                "rejected": rejected, "duplicates_ignored": len(self._index.duplicates)}
        with atomic_write(self.out_dir / MANIFEST) as fh:
            json.dump(body, fh, indent=2)
            fh.write("\n")


class PacedCommits:
    """Finished episodes handed to `store.commit` in batches, at most one commit every `every_s` seconds: a
    commit rewrites the open shard and the manifest and syncs both (milliseconds), and a collection that committed
    each episode as it finished spent that on the scheduler's thread several times a second. An episode waits at
    most `every_s` (a timer commits what waits), so a kill loses at most the episodes of the last `every_s` seconds
    besides those in flight, and a resume plays them again. `every_s` 0 commits each batch at once.

    `on_commit` hears of episodes once they are durable. Use as a context manager: its end commits what waits,
    also when the block raises (finished episodes are whole, so keeping them saves the resume their replay)."""

    def __init__(self, store: EpisodeStore, every_s: float,
                 on_commit: Callable[[list[Episode]], None] | None = None) -> None:
        if every_s < 0:
            raise ValueError(f"every_s must be at least 0, got {every_s}")
        self.store, self.every_s, self.on_commit = store, every_s, on_commit
        self._waiting: list[Episode] = []
        self._last = float("-inf")  # when the last commit ran
        self._lock = threading.Lock()  # the timer's thread and the caller's commit through one store
        self._timer: threading.Timer | None = None
        self._error: BaseException | None = None  # a commit on the timer's thread failed: raised to the caller

    def __call__(self, episodes: list[Episode]) -> None:
        with self._lock:
            self._raise_pending()
            self._waiting.extend(episodes)
            wait = self._last + self.every_s - time.monotonic()
            if wait <= 0 or len(self._waiting) >= self.store.shard_size:
                self._commit()
            elif self._timer is None:
                self._timer = threading.Timer(wait, self._on_timer)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        with self._lock:
            self._raise_pending()
            self._commit()

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
            try:
                self._commit()
            except BaseException as exc:  # noqa: BLE001 - the caller's thread raises it at its next call
                self._error = exc

    def _raise_pending(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _commit(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._waiting = self._waiting, []
        self._last = time.monotonic()
        if batch:
            self.store.commit(batch)
            if self.on_commit is not None:
                self.on_commit(batch)

    def __enter__(self) -> PacedCommits:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is None:
            self.flush()
            return
        try:
            self.flush()
        except Exception as failed:  # noqa: BLE001 - the block's own error is the one to see
            log.warning("episodes finished before the error could not be committed: %s", failed)


@dataclass(frozen=True)
class LoadedEpisodes:
    """Iterates as its episodes; `invalid` and `duplicates` say what was left out."""

    episodes: list[Episode]
    invalid: list[RejectedShard]  # shards in DIR/episodes that failed and were skipped (left where they are)
    duplicates: list[DuplicateKey]

    def __iter__(self) -> Iterator[Episode]:
        return iter(self.episodes)

    def __len__(self) -> int:
        return len(self.episodes)


def load_episodes_dir(out_dir: Path | str, *, strict: bool = False) -> LoadedEpisodes:
    """A rollout folder's episodes for downstream stages, read-only: every shard in DIR/episodes is validated and
    a failing one skipped with a warning (strict: InvalidShardError); DIR/rejected is never read."""
    index, episodes, invalid = _Index(), [], []
    for path, records, report in _validated(shard_paths(out_dir)):
        if not report.success:
            invalid.append(RejectedShard(path=path, moved_to=None, report=report))
            log.warning("skipping invalid shard: %s", report.summary())
            continue
        index.add(path, records)
        episodes.extend(Episode.model_validate(obj) for lineno, obj in records if (path, lineno) not in index.skip)
    if strict and invalid:
        raise InvalidShardError([r.report for r in invalid])
    return LoadedEpisodes(episodes=episodes, invalid=invalid, duplicates=index.duplicates)
