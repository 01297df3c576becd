"""OpenAIPolicy against a real HTTP server on loopback that injects faults (tests/policies/fault_server.py)."""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from pydantic import ValidationError

from components.envs.episode import Sampling
from components.policies.openai_compat import OpenAIConfig, OpenAIError, OpenAIPolicy, _retry_after_s
from components.policies.protocol import Generation, GenerationRequest, Policy
from tests.policies.fault_server import FaultServer, Recorded, Reply, context_overflow, drop, echo, error, hang, ok

KEY_ENV = "MEDGYM_TEST_OPENAI_KEY"
MakePolicy = Callable[..., OpenAIPolicy]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # a proxy from the environment must not sit in between
    with FaultServer() as s:
        yield s


@pytest.fixture
def make_policy(server: FaultServer) -> Iterator[MakePolicy]:
    made: list[OpenAIPolicy] = []

    def make(**overrides: object) -> OpenAIPolicy:
        settings: dict[str, object] = {"base_url": server.base_url, "model": "test-model", "request_timeout_s": 2.0,
                                       "max_retries": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "concurrency": 4}
        policy = OpenAIPolicy(OpenAIConfig.model_validate({**settings, **overrides}))
        made.append(policy)
        return policy

    yield make
    for policy in made:
        policy.close()


def request(text: str = "hello", key: str = "ep-0", **sampling: object) -> GenerationRequest:
    return GenerationRequest(key=key, messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": text}],
                             sampling=Sampling.model_validate(sampling))


# ---- the request and the reply


def test_sends_one_chat_completion_and_returns_its_text(server: FaultServer, make_policy: MakePolicy) -> None:
    policy = make_policy(extra_body={"top_k": 5}, max_context=4096)
    assert isinstance(policy, Policy) and policy.backend == "openai" and not policy.uses_tokens
    assert policy.max_context == 4096 and policy.model_id == "test-model"
    [gen] = policy.generate([request("2+2?", temperature=0.7, top_p=0.9, max_new_tokens=64, seed=11)])
    assert gen.text == "echo: 2+2?" and gen.finish_reason == "stop" and gen.token_ids is None
    assert gen.model_time_s > 0 and gen.metadata == {"usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    [seen] = server.requests
    assert seen.path == "/v1/chat/completions"
    assert seen.body == {"model": "test-model", "messages": request("2+2?").messages, "temperature": 0.7, "top_p": 0.9,
                         "max_tokens": 64, "seed": 11, "top_k": 5}
    assert "Authorization" not in seen.headers  # no api_key_env: a local server, no key sent


def test_length_and_unusual_finish_reasons(server: FaultServer, make_policy: MakePolicy) -> None:
    server.script(ok("cut", "length"), ok("filtered", "content_filter"))
    policy = make_policy(concurrency=1)  # one at a time: the script's order is the batch's order
    cut, filtered = policy.generate([request("a"), request("b")])
    assert (cut.text, cut.finish_reason) == ("cut", "length")
    assert (filtered.finish_reason, filtered.metadata["finish_reason"]) == ("stop", "content_filter")


def test_a_200_without_a_completion_fails_clearly(server: FaultServer, make_policy: MakePolicy) -> None:
    server.script(Reply(body="<html>proxy login</html>"))
    with pytest.raises(OpenAIError, match="without a chat completion") as info:
        make_policy().generate([request()])
    assert server.base_url in str(info.value) and len(server.requests) == 1


# ---- retries


def test_retries_429_and_5xx_then_succeeds(server: FaultServer, make_policy: MakePolicy, caplog: pytest.LogCaptureFixture) -> None:
    server.script(error(429, "slow down"), error(500, "boom"), error(503, "overloaded"), ok("finally"))
    caplog.set_level(logging.WARNING, logger="components.policies.openai_compat")
    [gen] = make_policy(max_retries=3).generate([request("secret prompt text")])
    assert gen.text == "finally" and gen.metadata["attempts"] == 4 and len(server.requests) == 4
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    for status, attempt, line in zip((429, 500, 503), (1, 2, 3), warnings, strict=True):
        assert f"status {status}" in line and f"attempt {attempt}/4" in line
        assert "secret prompt text" not in line and "overloaded" not in line  # server text may quote the prompt


def test_exhausted_retries_name_the_url_and_the_last_status(server: FaultServer, make_policy: MakePolicy) -> None:
    server.script(error(500), error(502), error(503, "still overloaded"))
    with pytest.raises(OpenAIError) as info:
        make_policy(max_retries=2).generate([request()])
    message = str(info.value)
    assert f"{server.base_url}/chat/completions" in message and "3 attempt(s)" in message
    assert "status 503" in message and "still overloaded" in message
    assert (info.value.status, info.value.attempts, len(server.requests)) == (503, 3, 3)


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_other_4xx_fail_at_once(server: FaultServer, make_policy: MakePolicy, status: int) -> None:
    server.script(error(status, "invalid temperature"), ok("never asked for"))
    start = time.monotonic()
    with pytest.raises(OpenAIError, match=f"status {status} \\(not retried\\): invalid temperature") as info:
        make_policy(max_retries=5, backoff_base_s=1.0).generate([request()])
    assert time.monotonic() - start < 0.5
    assert (info.value.status, info.value.attempts, len(server.requests)) == (status, 1, 1)


def test_backoff_waits_as_long_as_retry_after_says(server: FaultServer, make_policy: MakePolicy) -> None:
    server.script(error(429, retry_after="1"), ok("after the wait"))
    [gen] = make_policy(backoff_base_s=0.01, backoff_max_s=5.0).generate([request()])
    first, second = server.requests
    assert gen.text == "after the wait" and 0.95 <= second.arrived - first.arrived < 1.5


def test_without_retry_after_backoff_grows_within_its_bounds(server: FaultServer, make_policy: MakePolicy) -> None:
    server.script(error(503), error(503), error(503), ok("done"))
    make_policy(backoff_base_s=0.1, backoff_max_s=0.3).generate([request()])
    arrivals = [r.arrived for r in server.requests]
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    # equal jitter: attempt n waits between half and all of min(max, base * 2**(n-1)): 0.1, 0.2, 0.3 (capped)
    for gap, step in zip(gaps, (0.1, 0.2, 0.3), strict=True):
        assert step / 2 - 0.01 <= gap < step + 0.2


def test_a_long_retry_after_is_capped_by_backoff_max(server: FaultServer, make_policy: MakePolicy) -> None:
    server.script(error(429, retry_after="3600"), ok("soon"))
    start = time.monotonic()
    [gen] = make_policy(backoff_max_s=0.2).generate([request()])
    assert gen.text == "soon" and time.monotonic() - start < 1.0


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert _retry_after_s("2") == 2.0 and _retry_after_s("0.5") == 0.5
    assert _retry_after_s(None) is None and _retry_after_s("soon") is None
    later = _retry_after_s(format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True))
    assert later is not None and 25 < later <= 30
    assert _retry_after_s(format_datetime(datetime.now(UTC) - timedelta(hours=1), usegmt=True)) == 0.0


def test_a_hang_times_out_after_the_request_timeout_not_the_hang(server: FaultServer, make_policy: MakePolicy) -> None:
    server.script(hang(10))
    start = time.monotonic()
    with pytest.raises(OpenAIError, match="ReadTimeout after 0.3s") as info:
        make_policy(request_timeout_s=0.3, max_retries=0).generate([request()])
    assert 0.25 <= time.monotonic() - start < 1.5
    assert info.value.status is None and server.base_url in str(info.value)


def test_a_timeout_is_retried(server: FaultServer, make_policy: MakePolicy) -> None:
    server.script(hang(10), ok("second try"))
    start = time.monotonic()
    [gen] = make_policy(request_timeout_s=0.3).generate([request()])
    assert gen.text == "second try" and gen.metadata["attempts"] == 2
    assert gen.model_time_s >= 0.3 and time.monotonic() - start < 1.5  # model time counts the wait it cost


def test_a_dropped_connection_is_retried(server: FaultServer, make_policy: MakePolicy) -> None:
    server.script(drop(), drop(), ok("reconnected"))
    [gen] = make_policy().generate([request()])
    assert gen.text == "reconnected" and len(server.requests) == 3


def test_no_server_is_a_connection_error_after_the_retries() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free now, and nothing listens on it once closed
    policy = OpenAIPolicy(OpenAIConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1,
                                       backoff_base_s=0.01, request_timeout_s=1.0))
    try:
        with pytest.raises(OpenAIError, match="ConnectError") as info:
            policy.generate([request()])
        assert info.value.attempts == 2 and f"127.0.0.1:{port}" in str(info.value)
    finally:
        policy.close()


# ---- batches


def test_concurrency_limit_holds_and_order_is_kept(server: FaultServer, make_policy: MakePolicy) -> None:
    server.fallback = lambda r: dataclasses.replace(echo(r), delay_s=0.15)
    texts = [f"q{i}" for i in range(10)]
    start = time.monotonic()
    gens = make_policy(concurrency=3).generate([request(t, key=f"ep-{i}") for i, t in enumerate(texts)])
    assert [g.text for g in gens] == [f"echo: {t}" for t in texts]
    assert server.max_in_flight == 3  # never more, and the pool did use all three
    assert time.monotonic() - start < 10 * 0.15  # concurrent: 4 rounds of 3, not 10 one by one


def test_context_overflow_ends_that_request_only(server: FaultServer, make_policy: MakePolicy) -> None:
    def reply(r: Recorded) -> Reply:
        return context_overflow() if r.body["messages"][-1]["content"] == "long" else echo(r)

    server.fallback = reply
    short, long, other = make_policy().generate([request("short"), request("long"), request("other")])
    assert (short.text, other.text) == ("echo: short", "echo: other")
    assert (long.text, long.finish_reason, long.metadata["context_exceeded"]) == ("", "length", True)
    assert "maximum context length is 2048" in long.metadata["error"] and len(long.metadata["error"]) <= 300
    assert len(server.requests) == 3  # not retried


def test_one_failed_request_fails_the_batch(server: FaultServer, make_policy: MakePolicy) -> None:
    server.fallback = lambda r: error(404, "no such model") if r.body["messages"][-1]["content"] == "bad" else echo(r)
    with pytest.raises(OpenAIError, match="status 404"):
        make_policy().generate([request("fine"), request("bad")])


# ---- the key


def test_the_key_reaches_the_server_and_nothing_else(server: FaultServer, make_policy: MakePolicy,
                                                     monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    key = f"sk-medgym-{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_ENV, key)
    caplog.set_level(logging.DEBUG)  # httpx and httpcore too
    policy = make_policy(api_key_env=KEY_ENV)
    # servers that echo the key: in a retried error, in a context error, half-starred in a 401
    server.script(error(429, f"rate limit for {key}"), error(400, f"maximum context length exceeded ({key})"),
                  error(401, f"Incorrect API key provided: {key[:14]}****{key[-4:]}"))
    policy_cfg = policy.config
    [overflow] = policy.generate([request("a")])
    with pytest.raises(OpenAIError) as not_retried:
        policy.generate([request("b")])
    server.script(*[error(500, f"upstream said {key}")] * 4)
    with pytest.raises(OpenAIError) as exhausted:
        policy.generate([request("c")])
    [good] = policy.generate([request("d")])

    assert overflow.metadata["context_exceeded"] and good.text == "echo: d"
    assert [r.headers["Authorization"] for r in server.requests] == [f"Bearer {key}"] * len(server.requests) != []
    texts = [repr(policy), str(policy), repr(vars(policy)), repr(policy_cfg), str(policy_cfg), policy_cfg.model_dump_json(),
             repr(policy.tracking_params()), repr(overflow), repr(good), repr(dataclasses.asdict(good))]
    for info in (not_retried, exhausted):
        exc = info.value
        texts += [str(exc), repr(exc), repr(vars(exc)), "".join(traceback.format_exception(exc))]
        # what a reporter that prints locals (rich, Sentry) would show, from generate() down (not this test's frame)
        assert exc.__traceback__ is not None
        texts += list(traceback.TracebackException(type(exc), exc, exc.__traceback__.tb_next, capture_locals=True).format())
    for record in caplog.records:
        texts += [record.getMessage(), repr(record.args), record.exc_text or ""]
    assert len(caplog.records) > 3  # the retry warnings and httpx's own lines were there to check
    fragment = key[4:14]  # the 401's half-starred echo showed this much
    leaked = [t for t in texts if key in t or fragment in t]
    assert leaked == []
    assert policy.tracking_params()["api_key_env"] == KEY_ENV


def test_a_missing_key_variable_fails_before_sending(server: FaultServer, make_policy: MakePolicy,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(OpenAIError, match=f"\\${KEY_ENV}, which is not set"):
        make_policy(api_key_env=KEY_ENV).generate([request()])
    assert server.requests == []


# ---- config


def test_config_is_strict() -> None:
    with pytest.raises(ValidationError, match="Extra inputs"):
        OpenAIConfig(base_url="http://h/v1", model="m", api_key="sk-x")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="credentials"):
        OpenAIConfig(base_url="https://user:sk-x@h/v1", model="m")
    with pytest.raises(ValidationError, match="must not set max_tokens, model"):
        OpenAIConfig(base_url="http://h/v1", model="m", extra_body={"model": "other", "max_tokens": 1})
    with pytest.raises(ValidationError, match="http"):
        OpenAIConfig(base_url="h:8000/v1", model="m")
    assert OpenAIConfig(base_url="http://h/v1/", model="m").base_url == "http://h/v1"


def test_closed_policy_refuses_work(make_policy: MakePolicy) -> None:
    policy = make_policy()
    policy.close()
    policy.close()  # twice is fine
    with pytest.raises(RuntimeError, match="after close"):
        policy.generate([request()])


def test_generation_is_the_protocol_type(make_policy: MakePolicy) -> None:
    [gen] = make_policy().generate([request()])
    assert type(gen) is Generation
