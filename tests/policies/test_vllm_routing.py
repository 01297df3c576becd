"""The vllm policy over several engines: sticky episodes, least-loaded placement, per-engine concurrency, and
engines that die (connection refused, or dropped mid-request), against real HTTP servers on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from components.envs.episode import Sampling
from components.policies.models import SMOLLM2
from components.policies.protocol import GenerationRequest
from components.policies.vllm import VLLMPolicy, VLLMPolicyConfig
from components.policies.vllm_engines import device_slices, engine_configs
from components.policies.vllm_server import VLLMConfig, VLLMError
from tests.policies.fake_vllm import EOS, FakeVLLM


@pytest.fixture
def engines(request: pytest.FixtureRequest) -> Iterator[list[FakeVLLM]]:
    n, delay = request.param
    with ExitStack() as stack:
        yield [stack.enter_context(FakeVLLM(delay=lambda body, d=delay: d)) for _ in range(n)]


def policy(engines: list[FakeVLLM], **options: Any) -> VLLMPolicy:
    return VLLMPolicy(VLLMPolicyConfig(base_url=[e.base_url for e in engines], tokenizer=SMOLLM2, **options))


def ask(key: str, prompt: list[int]) -> GenerationRequest:
    return GenerationRequest(key=key, messages=[{"role": "user", "content": key}], sampling=Sampling(max_new_tokens=8),
                             prompt_token_ids=prompt)


def served_by(engines: list[FakeVLLM], prompt: list[int]) -> list[int]:
    return [i for i, e in enumerate(engines) if any(s.prompt == prompt for s in e.seen)]


@pytest.mark.parametrize("engines", [(2, 0.3)], indirect=True)
def test_episodes_stick_to_their_engine_and_new_ones_go_to_the_least_loaded(engines: list[FakeVLLM]) -> None:
    with policy(engines) as p:
        first = {f"e{i}": [100 * i] for i in range(1, 5)}
        gens = p.generate([ask(k, v) for k, v in first.items()])
        assert [g.token_ids for g in gens] == [[v[0] + 1, EOS] for v in first.values()]
        placed = {k: served_by(engines, v) for k, v in first.items()}
        assert placed == {"e1": [0], "e2": [1], "e3": [0], "e4": [1]}  # spread evenly
        # the next turns extend each context and go where the episode's first turn went (its prefix cache)
        second = {k: v + [v[0] + 1, EOS, 7] for k, v in first.items()}
        p.generate([ask(k, v) for k, v in second.items()])
        assert {k: served_by(engines, v) for k, v in second.items()} == placed
        # e1 and e3 end: engine 0 has room, so both new episodes go there (round-robin would put one on engine 1)
        p.release("e1")
        p.release("e3")
        p.generate([ask("e5", [500]), ask("e6", [600])])
        assert served_by(engines, [500]) == served_by(engines, [600]) == [0]
        assert p._router.episodes() == [2, 2]


@pytest.mark.parametrize("engines", [(3, 0.0)], indirect=True)
def test_a_dead_engine_sends_its_episodes_elsewhere_and_none_left_is_a_clear_error(engines: list[FakeVLLM]) -> None:
    a, b, c = engines
    with policy(engines) as p:
        for key, prompt in (("e1", [10]), ("e2", [20]), ("e3", [30])):
            p.generate([ask(key, prompt)])
        assert [served_by(engines, [x]) for x in (10, 20, 30)] == [[0], [1], [2]]
        b.kill()  # refused: e2's next turn is answered by another engine
        [gen] = p.generate([ask("e2", [20, 21, EOS, 5])])
        assert gen.token_ids == [6, EOS] and served_by(engines, [20, 21, EOS, 5]) == [0]
        c.drop_next = True  # c dies in the middle of e3's request: sent again to a
        [gen] = p.generate([ask("e3", [30, 31, EOS, 8])])
        assert gen.token_ids == [9, EOS] and served_by(engines, [30, 31, EOS, 8]) == [0, 2]
        assert set(p._router.down()) == {b.base_url, c.base_url}
        a.fail_with = (500, "Internal error")  # a failed request, not a dead engine: no retry, a's episodes stay
        with pytest.raises(VLLMError, match="returned 500: Internal error"):
            p.generate([ask("e1", [10, 11, EOS, 2])])
        assert set(p._router.down()) == {b.base_url, c.base_url}
        a.fail_with = None
        p.generate([ask("e4", [40])])
        assert served_by(engines, [40]) == [0]
        # vLLM's API server still answers, but its engine core died: a is down too, and none is left
        a.fail_with = (500, "EngineCore encountered an issue. See stack trace (above) for the root cause.")
        with pytest.raises(VLLMError, match="all 3 engines are down") as err:
            p.generate([ask("e1", [10, 11, EOS, 1])])
        for e in engines:
            assert e.base_url in str(err.value)
        assert "ConnectError" in str(err.value) and "RemoteProtocolError" in str(err.value)
        assert "EngineCore encountered" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("engines", [(2, 0.4)], indirect=True)
def test_each_engine_takes_at_most_its_concurrency_and_submit_does_not_wait_for_a_batch(engines: list[FakeVLLM]) -> None:
    with policy(engines, concurrency=2) as p:
        started = time.monotonic()
        futures = [p.submit(ask(f"e{i}", [i + 1])) for i in range(8)]
        submitted = time.monotonic() - started
        assert submitted < 0.3  # submit returns at once; the futures fill as engines answer
        assert [f.result().token_ids for f in futures] == [[i + 2, EOS] for i in range(8)]
        elapsed = time.monotonic() - started
    assert [len(e.seen) for e in engines] == [4, 4]
    assert [e.peak for e in engines] == [2, 2]  # two in flight per engine, four at once in all
    assert elapsed >= 2 * 0.4 - 0.05


def test_engines_get_their_own_device_slice_and_port() -> None:
    assert device_slices(1, None, None, visible="3,5") == [None]  # one engine sees what the process sees
    assert device_slices(4, 2, None) == ["0,1", "2,3", "4,5", "6,7"]
    assert device_slices(2, 1, None, visible="3,5") == ["3", "5"]  # Ray gave this actor GPUs 3 and 5
    assert device_slices(2, 2, ["7", "6", "5", "4"]) == ["7,6", "5,4"]
    with pytest.raises(ValueError, match="2 engines of tensor_parallel_size 2 need 4 devices, only 2 are visible: 3,5"):
        device_slices(2, 2, None, visible="3,5")
    configs = engine_configs(VLLMConfig(tensor_parallel_size=2, env={"X": "1"}), 2)
    assert [c.env for c in configs] == [{"X": "1", "CUDA_VISIBLE_DEVICES": "0,1"}, {"X": "1", "CUDA_VISIBLE_DEVICES": "2,3"}]
    with pytest.raises(ValueError, match="port 8000 is set, but 2 engines need a port each"):
        engine_configs(VLLMConfig(port=8000), 2)
    with pytest.raises(ValueError, match="list one URL per engine"):
        VLLMPolicyConfig(base_url="http://127.0.0.1:1", engines=2)
    assert VLLMPolicyConfig(base_url=["http://h:1/v1", "http://h:2/"]).urls() == ["http://h:1", "http://h:2"]
