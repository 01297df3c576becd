"""Which engine serves a request when a policy spreads its requests over several (one vLLM server per GPU or
tensor-parallel group, or several OpenAI-compatible endpoints).

Episodes stick to an engine: every turn of an episode goes where its first turn went, so the engine's prefix
cache holds the episode's context (a multi-turn context only grows, and a later turn re-reads all of it). A new
episode goes to the least-loaded live engine: fewest episodes pinned, then fewest requests in flight, then the
lowest index (so placement is reproducible for a given order of arrivals). `release(key)` unpins an ended
episode. An engine that dies is marked down: its episodes are placed again on the live ones, and once none is
left `acquire` raises EnginesDown naming each engine and why it went down.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class EngineDown(Exception):
    """A request could not reach its engine (connection refused or dropped): retry it on another one."""


class EnginesDown(RuntimeError):
    """Every engine of a policy is down; the message names each and its reason."""


class Router:
    def __init__(self, names: list[str]):
        if not names:
            raise ValueError("a router needs at least one engine")
        self.names = list(names)
        self._pinned: dict[str, int] = {}
        self._episodes = [0] * len(names)
        self._in_flight = [0] * len(names)
        self._down: dict[int, str] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str) -> int:
        """The engine for one request of episode `key` (counted in flight until `done`)."""
        with self._lock:
            engine = self._pinned.get(key)
            if engine is None or engine in self._down:
                if engine is not None:
                    self._episodes[engine] -= 1
                live = [i for i in range(len(self.names)) if i not in self._down]
                if not live:
                    reasons = "; ".join(f"{self.names[i]}: {why}" for i, why in sorted(self._down.items()))
                    raise EnginesDown(f"all {len(self.names)} engines are down: {reasons}")
                engine = min(live, key=lambda i: (self._episodes[i], self._in_flight[i], i))
                self._pinned[key] = engine
                self._episodes[engine] += 1
            self._in_flight[engine] += 1
            return engine

    def done(self, engine: int) -> None:
        with self._lock:
            self._in_flight[engine] -= 1

    def release(self, key: str) -> None:
        """Episode `key` is over: its engine takes a new one in its place."""
        with self._lock:
            engine = self._pinned.pop(key, None)
            if engine is not None:
                self._episodes[engine] -= 1

    def mark_down(self, engine: int, reason: str) -> None:
        with self._lock:
            if engine not in self._down:
                self._down[engine] = " ".join(reason.split())[:300]
                log.warning("engine %s is down (%s); its episodes go to the others", self.names[engine], reason[:300])

    def down(self) -> dict[str, str]:
        with self._lock:
            return {self.names[i]: why for i, why in self._down.items()}

    def episodes(self) -> list[int]:
        """Live episodes pinned to each engine."""
        with self._lock:
            return list(self._episodes)
