"""A scriptable OpenAI-compatible chat-completions server on 127.0.0.1, for testing clients against real faults.

Each test queues replies (`script`): a status with or without Retry-After, a hang, a dropped connection, a
context-length 400, a good completion. Requests take the queue in arrival order; once it is empty `fallback`
answers (by default a completion that echoes the last message). Every request is recorded with its headers,
body and arrival time, and the server counts how many it is handling at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # a dict is sent as JSON, a str as is; None with status 200: an echo completion
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # wait this long before answering (longer than the client's timeout: a hang)
    drop: bool = False  # close the connection without any response


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    arrived: float  # time.monotonic()


def completion(text: str, finish_reason: str = "stop", usage: dict[str, int] | None = None) -> dict[str, Any]:
    return {"id": "cmpl-test", "object": "chat.completion", "model": "test-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
            "usage": usage or {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}


def ok(text: str, finish_reason: str = "stop") -> Reply:
    return Reply(body=completion(text, finish_reason))


def error(status: int, message: str = "error", retry_after: str | None = None) -> Reply:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Reply(status=status, body={"object": "error", "message": message, "type": "Error", "code": status}, headers=headers)


def context_overflow(limit: int = 2048, asked: int = 2600) -> Reply:
    # vLLM's wording
    return error(400, f"This model's maximum context length is {limit} tokens. However, you requested {asked} tokens "
                      f"({asked - 512} in the messages, 512 in the completion). Please reduce the length of the messages.")


def hang(seconds: float) -> Reply:
    return Reply(delay_s=seconds)


def drop() -> Reply:
    return Reply(drop=True)


def echo(request: Recorded) -> Reply:
    messages = request.body.get("messages") or [{"content": ""}]
    return ok(f"echo: {messages[-1]['content']}")


class FaultServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.fallback: Callable[[Recorded], Reply] = echo
        self.in_flight = 0
        self.max_in_flight = 0
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()  # ends every hang at shutdown, so stopping never waits on one
        self._httpd = _Server(("127.0.0.1", 0), _handler(self))  # port 0: a free port
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def _take(self, request: Recorded) -> Reply:
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            reply = self._queue.popleft() if self._queue else None
        return reply if reply is not None else self.fallback(request)

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up on a hang leaves a broken pipe behind: expected here, not worth a traceback


def _handler(server: FaultServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers do: a dropped connection then really drops

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"_raw": raw.decode(errors="replace")}
            request = Recorded(self.path, dict(self.headers.items()), body, time.monotonic())
            reply = server._take(request)
            try:
                self._send(reply, request)
            finally:
                server._done()

        def _send(self, reply: Reply, request: Recorded) -> None:
            if reply.delay_s and server._stop.wait(reply.delay_s):
                return
            if reply.drop:
                self.close_connection = True
                return
            body = reply.body
            if body is None and reply.status == 200:
                body = echo(request).body
            data = json.dumps(body).encode() if not isinstance(body, str) else body.encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json" if not isinstance(body, str) else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: tests read `requests`, not stderr

    return Handler
