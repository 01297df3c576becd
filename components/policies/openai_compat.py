"""A policy served by any OpenAI-compatible chat-completions endpoint (vllm serve, SGLang, an API model).

Text in, text out: the endpoint applies its own chat template, so `uses_tokens` is False. A batch's requests go
out concurrently, at most `concurrency` in flight for the whole policy (one thread pool, one connection pool);
`submit` sends one request on the same pool as soon as its episode is ready.

Failures: 429, 408, 5xx, connection errors and timeouts are retried with exponential backoff and jitter (a
Retry-After header sets the wait instead, up to backoff_max_s); any other 4xx fails at once. A prompt longer than the model's
context is not an error for the caller: it comes back as an empty "length" generation marked
`context_exceeded`, so the rollout can end that episode as context_limit and carry on with the rest.

The API key lives only in the environment variable `api_key_env` names. It is read when a batch is sent and
passed to each request as a local value: the policy, its config and its httpx client never hold it, so their
reprs and `tracking_params` cannot show it, and server text that reaches a log line, an exception or metadata
is scrubbed of it. Errors are raised without chained httpx exceptions, whose frames hold the request headers.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from components.policies.fanout import all_or_first_error
from components.policies.protocol import CONTEXT_ERROR, Generation, GenerationRequest, context_exceeded

log = logging.getLogger(__name__)

# what every request sets itself; extra_body may add fields but not replace these (stream/n would break parsing)
_RESERVED = frozenset({"model", "messages", "temperature", "top_p", "max_tokens", "seed", "stream", "n"})
_ERROR_CHARS = 300  # how much of a server's error text a message or metadata carries
_MIN_KEY_FRAGMENT = 8  # an echoed key fragment this long is masked too (servers often echo a key half-starred)


class OpenAIConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(description="up to and including /v1, e.g. http://127.0.0.1:8000/v1")
    model: str
    api_key_env: str | None = Field(default=None, description="NAME of the variable holding the key; None: no key")
    request_timeout_s: float = Field(default=120.0, gt=0, description="bounds connecting and each read/write")
    max_retries: int = Field(default=5, ge=0, description="retries after the first attempt")
    backoff_base_s: float = Field(default=1.0, ge=0)
    backoff_max_s: float = Field(default=60.0, ge=0, description="bounds every wait, Retry-After included")
    concurrency: int = Field(default=8, gt=0, description="requests in flight at most")
    max_context: int | None = Field(default=None, gt=0)
    extra_body: dict[str, Any] = Field(default_factory=dict, description="more request fields, e.g. top_k")

    @field_validator("base_url")
    @classmethod
    def _plain_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {value!r}")
        if parts.username or parts.password:
            # a URL is printed everywhere (logs, errors, tracking): credentials belong in api_key_env
            raise ValueError("base_url must not carry credentials; name the key's environment variable in api_key_env")
        return value.rstrip("/")

    @field_validator("extra_body")
    @classmethod
    def _no_reserved(cls, value: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(_RESERVED & value.keys())
        if clash:
            raise ValueError(f"extra_body must not set {', '.join(clash)}: the policy sets them per request")
        return value


class OpenAIError(RuntimeError):
    """A request that failed for good; the message names the URL and the last status, never the key."""

    def __init__(self, message: str, url: str, status: int | None, attempts: int):
        super().__init__(message)
        self.url = url
        self.status = status  # None: no HTTP response (connection error or timeout)
        self.attempts = attempts


class _Retryable(Exception):
    def __init__(self, what: str, status: int | None, detail: str = "", retry_after_s: float | None = None):
        super().__init__(what)  # what the log line says: a status or an error type, never server text
        self.status = status
        self.detail = detail  # the server's words, for the final exception only (they may quote the prompt)
        self.retry_after_s = retry_after_s


class OpenAIPolicy:
    backend = "openai"
    uses_tokens = False

    def __init__(self, config: OpenAIConfig):
        self.config = config
        self.model_id = config.model
        self.max_context = config.max_context
        self.url = f"{config.base_url}/chat/completions"
        limits = httpx.Limits(max_connections=config.concurrency, max_keepalive_connections=config.concurrency)
        self._client = httpx.Client(timeout=httpx.Timeout(config.request_timeout_s), limits=limits)
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="openai-policy")
        self._closed = threading.Event()

    def __repr__(self) -> str:
        return f"OpenAIPolicy(model={self.model_id!r}, url={self.url!r}, concurrency={self.config.concurrency})"

    def tracking_params(self) -> dict[str, str]:
        """The settings to record with a run (never the key: only the name of its variable)."""
        c = self.config
        return {
            "backend": self.backend, "model": c.model, "base_url": c.base_url, "api_key_env": c.api_key_env or "",
            "request_timeout_s": str(c.request_timeout_s), "max_retries": str(c.max_retries),
            "backoff_base_s": str(c.backoff_base_s), "backoff_max_s": str(c.backoff_max_s),
            "concurrency": str(c.concurrency), "max_context": "" if c.max_context is None else str(c.max_context),
            "extra_body": json.dumps(c.extra_body, sort_keys=True, default=str),
        }

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        if self._closed.is_set():
            raise RuntimeError("OpenAIPolicy.generate after close()")
        key = self._key()
        return all_or_first_error(self._pool, lambda r: self._one(r, key), requests)

    def submit(self, request: GenerationRequest) -> Future[Generation]:
        """Send one request now (the rollout scheduler's path: an episode's turn never waits for a batch)."""
        if self._closed.is_set():
            raise RuntimeError("OpenAIPolicy.submit after close()")
        return self._pool.submit(self._one, request, self._key())

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._client.close()

    # ---- one request, with retries

    def _one(self, request: GenerationRequest, key: _Key | None) -> Generation:
        s = request.sampling
        payload = {**self.config.extra_body, "model": self.config.model, "messages": request.messages,
                   "temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_new_tokens, "seed": s.seed}
        attempts = self.config.max_retries + 1
        start = time.perf_counter()
        for attempt in range(1, attempts + 1):
            try:
                generation = self._attempt(payload, key)
            except _Retryable as exc:
                last = exc
            except OpenAIError as exc:
                exc.attempts = attempt
                raise
            else:
                generation.model_time_s = time.perf_counter() - start
                if attempt > 1:
                    generation.metadata["attempts"] = attempt
                return generation
            if attempt == attempts:
                break
            delay = self._delay(attempt, last.retry_after_s)
            log.warning("POST %s: %s (attempt %d/%d, episode %s); retrying in %.2fs",
                        self.url, last, attempt, attempts, request.key, delay)
            if self._closed.wait(delay):  # close() during a wait: stop retrying
                break
        why = "abandoned: the policy was closed" if self._closed.is_set() else f"failed after {attempt} attempt(s)"
        # raised outside the except block, so the error chains nothing: httpx's exceptions (and their frames'
        # locals, which hold the request headers) stay out of whatever prints or reports this one
        raise OpenAIError(f"POST {self.url} {why}; last: {last}{last.detail}", self.url, last.status, attempt)

    def _attempt(self, payload: dict[str, Any], key: _Key | None) -> Generation:
        try:
            resp = self._client.post(self.url, json=payload, headers=key.header() if key else None)
        except httpx.TimeoutException as exc:
            raise _Retryable(f"{type(exc).__name__} after {self.config.request_timeout_s}s", None) from None
        except httpx.TransportError as exc:
            raise _Retryable(f"{type(exc).__name__}: {_scrub(str(exc), key)}", None) from None
        status = resp.status_code
        if status == 200:
            return self._parse(resp, key)
        detail = _error_text(resp, key)
        # 408 is the server's own request timeout: as retryable as ours
        if status in (408, 429) or status >= 500:
            raise _Retryable(f"status {status}", status, f": {detail}", _retry_after_s(resp.headers.get("retry-after")))
        if status in (400, 413) and CONTEXT_ERROR.search(detail):
            return context_exceeded(detail)
        raise OpenAIError(f"POST {self.url} returned status {status} (not retried): {detail}", self.url, status, 1)

    def _parse(self, resp: httpx.Response, key: _Key | None) -> Generation:
        try:
            body = resp.json()
            choice = body["choices"][0]
            text = choice["message"].get("content") or ""
            raw_finish = choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise OpenAIError(f"POST {self.url} returned status 200 without a chat completion: "
                              f"{_scrub(resp.text, key)[:_ERROR_CHARS]!r}", self.url, 200, 1) from None
        metadata: dict[str, Any] = {}
        if raw_finish not in ("stop", "length"):  # tool_calls, content_filter, abort, None: kept for the record
            metadata["finish_reason"] = raw_finish
        usage = body.get("usage")
        if isinstance(usage, dict):  # the only token counts a text backend gets
            metadata["usage"] = {k: usage[k] for k in ("prompt_tokens", "completion_tokens") if k in usage}
        return Generation(text=text, finish_reason="length" if raw_finish == "length" else "stop", metadata=metadata)

    def _delay(self, attempt: int, retry_after_s: float | None) -> float:
        cap = self.config.backoff_max_s
        if retry_after_s is not None:
            return min(retry_after_s, cap)
        step = min(cap, self.config.backoff_base_s * 2 ** (attempt - 1))
        return step / 2 + random.uniform(0, step / 2)  # "equal jitter": grows, yet spreads concurrent retries

    # ---- the key

    def _key(self) -> _Key | None:
        name = self.config.api_key_env
        if name is None:
            return None
        value = os.environ.get(name)
        if not value:
            raise OpenAIError(f"the API key for {self.url} is read from ${name}, which is not set", self.url, None, 0)
        return _Key(value)


class _Key:
    """The key, in an object whose repr is '***': a traceback that prints locals (rich, Sentry) shows no more."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def __repr__(self) -> str:
        return "_Key('***')"

    __str__ = __repr__

    def header(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._value}"}

    def scrub(self, text: str) -> str:
        """`text` without the key, and without any word holding a long fragment of it (a half-starred echo)."""
        key = self._value
        text = text.replace(key, "***")
        if len(key) < _MIN_KEY_FRAGMENT:
            return text
        fragments = {key[i:i + _MIN_KEY_FRAGMENT] for i in range(len(key) - _MIN_KEY_FRAGMENT + 1)}
        return re.sub(r"\S+", lambda m: "***" if any(f in m.group() for f in fragments) else m.group(), text)


def _retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds to wait: a number of seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _error_text(resp: httpx.Response, key: _Key | None) -> str:
    """The server's error message (OpenAI: error.message, vLLM: message), else its body; scrubbed, then cut."""
    text = resp.text
    try:
        body = resp.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        err = body.get("error")
        message = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else body.get("message")
        code = err.get("code") if isinstance(err, dict) else None
        if isinstance(message, str):
            text = f"{message} ({code})" if isinstance(code, str) else message
    # scrub before cutting: a cut could leave a fragment of the key that no longer matches it whole
    return _scrub(" ".join(text.split()), key)[:_ERROR_CHARS] or f"HTTP {resp.status_code}"


def _scrub(text: str, key: _Key | None) -> str:
    return key.scrub(text) if key else text
