"""Many episodes in flight: every live episode is stepped, its model call goes out as soon as its step ends, and
the environment work (sandboxes, world models) runs in a bounded pool while the model generates.

The scheduler plays any environment of the one protocol (components.envs.protocol.Env), each episode on an
environment `env_factory` makes: the coding environment with its sandboxes, DiagGym's with its world model.

Each episode alternates between two states: waiting for the model, or running in the environment (a sandbox
start, a code run, a check). A policy that takes requests one at a time (`submit`: the HTTP backends, whose
servers batch by themselves) gets each episode's request the moment its step ends, so no turn waits for the
slowest episode of a batch. Any other policy (hf batches on this process; scripted answers at once) gets
everything that waits for the model in one `policy.generate` call, and while that runs the pool keeps stepping
the episodes whose replies came back earlier. Token backends get their context as exact ids
(components.policies.tokens): the prompt only ever grows by the sampled tokens and the observation's template
tokens. An episode whose next call would not fit the model's context ends there with outcome context_limit. A
finished episode is handed to `on_finished` as soon as its loop iteration ends, so a caller that commits it then
loses at most the episodes still in flight.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from components.envs.episode import Episode, PolicyInfo
from components.envs.protocol import Env
from components.policies.protocol import Generation, GenerationRequest, Policy, context_exceeded, is_context_exceeded
from components.policies.tokens import ChatTokens
from components.rollout.jobs import RolloutJob

log = logging.getLogger(__name__)


@dataclass
class _Live:
    job: RolloutJob
    env: Env
    memory: dict[str, Any] = field(default_factory=dict)
    context: list[int] | None = None  # token backends: the exact ids of the next prompt


@dataclass
class SchedulerStats:
    failed: int = 0  # episodes lost to an infrastructure error (not written: a resume plays them again)
    errors: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)  # on Ray: the GPUs each actor was given (CUDA_VISIBLE_DEVICES)


class RolloutScheduler:
    def __init__(self, policy: Policy, env_factory: Callable[[], Env], *, workers: int = 2, max_in_flight: int = 32,
                 min_new_tokens: int = 16):
        if workers < 1 or max_in_flight < 1:
            raise ValueError("workers and max_in_flight must be at least 1")
        self.policy = policy
        self.env_factory = env_factory  # one environment per episode: each holds its episode's state
        self.workers = workers
        self.max_in_flight = max_in_flight
        self.min_new_tokens = min_new_tokens
        self.chat = ChatTokens(policy.tokenizer) if policy.uses_tokens else None  # type: ignore[attr-defined]
        # how long a model call may wait for more episodes to join its batch (hf: a call costs seconds)
        self.gather_s = float(getattr(policy, "gather_s", 0.0))
        # one request at a time, sent as soon as its episode is ready (HTTP backends); None: whole batches
        self.submit: Callable[[GenerationRequest], Future[Generation]] | None = getattr(policy, "submit", None)
        self.stats = SchedulerStats()

    def run(self, jobs: Iterable[RolloutJob], on_finished: Callable[[list[Episode]], None]) -> SchedulerStats:
        pending: Iterator[RolloutJob] = iter(jobs)
        running: dict[Future[_Live], RolloutJob] = {}
        asking: dict[Future[Generation], _Live] = {}  # model calls in flight, one per episode (policies with submit)
        waiting: list[_Live] = []
        exhausted = False
        with ThreadPoolExecutor(self.workers, thread_name_prefix="rollout-env") as pool:
            while True:
                while not exhausted and len(running) + len(asking) + len(waiting) < self.max_in_flight:
                    job = next(pending, None)
                    if job is None:
                        exhausted = True
                        break
                    running[pool.submit(self._start, job)] = job
                if self.submit is None and waiting and running and len(waiting) < len(running) and self.gather_s > 0:
                    # a model call costs seconds: let the steps about to finish join this batch
                    wait(list(running), timeout=self.gather_s, return_when=FIRST_COMPLETED)
                    waiting += self._collect(running, on_finished)
                if waiting:
                    batch, waiting = waiting, []
                    if self.submit is not None:
                        for live, ask in self._requests(batch):
                            if isinstance(ask, Generation):
                                running[pool.submit(self._step, live, ask)] = live.job
                            else:
                                asking[self.submit(ask)] = live
                    else:
                        for live, gen in self._generate(batch):
                            running[pool.submit(self._step, live, gen)] = live.job
                elif running or asking:
                    wait([*running, *asking], return_when=FIRST_COMPLETED)
                elif exhausted:
                    break
                for fut in [f for f in asking if f.done()]:
                    live = asking.pop(fut)
                    # a failed model call ends the collection, as a failed batch does: the engines are gone
                    running[pool.submit(self._step, live, fut.result())] = live.job
                waiting += self._collect(running, on_finished)
        return self.stats

    def _collect(self, running: dict[Future[_Live], RolloutJob], on_finished: Callable[[list[Episode]], None]
                 ) -> list[_Live]:
        """Take the finished environment steps: hand over ended episodes, return those waiting for the model."""
        finished, waiting = [], []
        for fut in [f for f in running if f.done()]:
            job = running.pop(fut)
            try:
                live = fut.result()
            except Exception as exc:  # noqa: BLE001 - one broken sandbox must not end the collection
                self._fail(job, exc)
                continue
            if live.env.episode.done:
                finished.append(self._close(live))
            else:
                waiting.append(live)
        if finished:
            on_finished(finished)
        return waiting

    # ------------------------------------------------------------------ environment side (pool threads)
    def _start(self, job: RolloutJob) -> _Live:
        started = time.monotonic()
        env = self.env_factory()
        try:
            env.reset(job.task, job.sample_index)
        except BaseException:
            env.close()
            raise
        live = _Live(job=job, env=env)
        ep = env.episode
        ep.policy = PolicyInfo(backend=self.policy.backend, model=self.policy.model_id, sampling=job.sampling)
        ep.env_time_s += time.monotonic() - started
        if self.chat is not None:
            live.context = self.chat.start(ep.messages())
        return live

    def _step(self, live: _Live, gen: Generation) -> _Live:
        try:
            return self._advance(live, gen)
        except BaseException:
            live.env.close()  # the episode is lost; its sandbox must not outlive it
            raise

    def _advance(self, live: _Live, gen: Generation) -> _Live:
        ep = live.env.episode
        ep.model_time_s += gen.model_time_s
        if is_context_exceeded(gen):  # the backend (or _generate below) says the context is full
            live.env.end_for_context(str(gen.metadata.get("error", "the model's context is full"))[:300])
            return live
        prompt = live.context
        live.env.step(gen.text)
        turn = ep.turns[-1]
        ep.env_time_s += turn.duration_s
        turn.model_time_s = gen.model_time_s
        turn.metadata.update(gen.metadata)
        if gen.finish_reason == "length":
            turn.metadata["finish_reason"] = "length"
        if gen.token_ids is not None:
            turn.prompt_token_ids = prompt
            turn.response_token_ids = list(gen.token_ids)
            turn.response_logprobs = gen.logprobs
            turn.loss_mask = [1] * len(gen.token_ids)
            ep.completion_tokens += len(gen.token_ids)
            ep.prompt_tokens = max(ep.prompt_tokens, len(prompt or []))
            if not ep.done and self.chat is not None and prompt is not None:
                live.context = prompt + gen.token_ids + self.chat.close_response(gen.token_ids) + \
                    self.chat.observation(turn.observation)
        return live

    # ------------------------------------------------------------------ model side (this thread)
    def _requests(self, batch: list[_Live]) -> Iterator[tuple[_Live, GenerationRequest | Generation]]:
        """Each episode's next request, or (its context being full) the generation that ends it."""
        limit = self.policy.max_context
        for live in batch:
            sampling = live.job.sampling
            if limit is not None and live.context is not None:
                room = limit - len(live.context)
                if room < self.min_new_tokens:
                    # ends in the pool, like any other step, so the episode's sandbox is closed off this thread
                    reason = f"prompt of {len(live.context)} tokens leaves {max(room, 0)} of {limit} for the reply"
                    yield live, context_exceeded(reason)
                    continue
                if room < sampling.max_new_tokens:
                    sampling = sampling.model_copy(update={"max_new_tokens": room})
            yield live, GenerationRequest(key=live.env.episode.episode_id, messages=live.env.episode.messages(),
                                          sampling=sampling, prompt_token_ids=live.context, task=live.job.task,
                                          memory=live.memory)

    def _generate(self, batch: list[_Live]) -> list[tuple[_Live, Generation]]:
        ready, requests = [], []
        for live, ask in self._requests(batch):
            if isinstance(ask, Generation):
                ready.append((live, ask))
            else:
                requests.append((live, ask))
        if requests:
            gens = self.policy.generate([r for _, r in requests])
            if len(gens) != len(requests):
                raise RuntimeError(f"{self.policy.backend} returned {len(gens)} generations for {len(requests)} requests")
            ready += [(live, gen) for (live, _), gen in zip(requests, gens, strict=True)]
        return ready

    def _close(self, live: _Live) -> Episode:
        live.env.close()
        self._release(live.env.episode.episode_id)
        return live.env.episode

    def _release(self, key: str) -> None:
        """Tell a policy that keeps per-episode state (hf's keys and values) that the episode is over."""
        release = getattr(self.policy, "release", None)
        if release is not None:
            release(key)

    def _fail(self, job: RolloutJob, exc: Exception) -> None:
        self.stats.failed += 1
        self._release(job.episode_id)
        msg = f"{job.episode_id}: {type(exc).__name__}: {exc}"[:500]
        if len(self.stats.errors) < 20:
            self.stats.errors.append(msg)
        log.warning("episode lost (it is played again on resume): %s", msg)
