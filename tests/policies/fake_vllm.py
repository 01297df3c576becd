"""A vLLM look-alike on 127.0.0.1 for routing tests: /health, /v1/models and exact-token /v1/completions.

Each request is answered with two ids (the prompt's last id plus one, then the end-of-turn id) and their
log-probabilities, echoing the prompt's ids as vLLM does. `delay(body)` picks each reply's delay; `drop_next`
closes the connection of the next request without an answer (an engine dying mid-request); `fail_with` answers every
request with an error; `kill()` stops
listening (connection refused from then on). Every request is recorded with its arrival and answer times, and
the server counts how many it handles at once.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EOS = 2  # SmolLM2's <|im_end|>


@dataclass
class Seen:
    prompt: list[int]
    arrived: float  # time.monotonic()
    answered: float | None = None


class FakeVLLM:
    def __init__(self, name: str = "fake", max_model_len: int = 8192, delay: Callable[[dict[str, Any]], float] | None = None):
        self.name = name
        self.max_model_len = max_model_len
        self.delay = delay or (lambda body: 0.0)
        self.seen: list[Seen] = []
        self.drop_next = False
        self.fail_with: tuple[int, str] | None = None  # answer every request with this status and error message
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as vLLM's server does

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with fake._lock:
                    fake._connections.add(self.connection)

            def reply(self, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    return self.reply({"data": [{"id": fake.name, "max_model_len": fake.max_model_len}]})
                self.reply({})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                seen = Seen(prompt=list(body["prompt"]), arrived=time.monotonic())
                with fake._lock:
                    fake.seen.append(seen)
                    drop, fake.drop_next = fake.drop_next, False
                    fake.in_flight += 1
                    fake.peak = max(fake.peak, fake.in_flight)
                try:
                    if drop:
                        self.close_connection = True
                        self.connection.close()
                        return
                    if fake.fail_with is not None:
                        status, message = fake.fail_with
                        data = json.dumps({"error": {"message": message, "code": status}}).encode()
                        self.send_response(status)
                        self.send_header("content-type", "application/json")
                        self.send_header("content-length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    time.sleep(fake.delay(body))
                    ids = [body["prompt"][-1] % 40000 + 1, EOS]
                    seen.answered = time.monotonic()
                    self.reply({"choices": [{"index": 0, "text": f"t{ids[0]}", "token_ids": ids,
                                             "logprobs": {"token_logprobs": [-0.5, -0.25]},
                                             "prompt_token_ids": body["prompt"], "finish_reason": "stop",
                                             "stop_reason": None}]})
                finally:
                    with fake._lock:
                        fake.in_flight -= 1

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._alive = True

    def kill(self) -> None:
        """Stop answering: the listening socket closes, so new connections are refused."""
        if self._alive:
            self._alive = False
            self._server.shutdown()
            self._server.server_close()
            with self._lock:  # kept-alive connections too: a dead engine answers no one
                for conn in self._connections:
                    with contextlib.suppress(OSError):
                        conn.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> FakeVLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
