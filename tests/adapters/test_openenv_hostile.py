"""A hostile client of `medgym env serve` gets nothing of the answer and the server stays up (issue 25 §4).

It asks for metadata and state, sends crafted and malformed payloads, calls reset and step out of order, sends
huge actions and messages, and has its code look for the task file; every byte it receives is checked against
the truths' printed forms, and after each attack a fresh episode still plays to the checker's reward.
"""

from __future__ import annotations

import json
import time

import pytest
import requests
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.adapters.conftest import FEMALE_MEAN_AGE, secrets


class Raw:
    """A WebSocket session on /ws speaking OpenEnv's messages by hand; it keeps everything it received."""

    def __init__(self, url: str) -> None:
        self.ws = connect(url.replace("http://", "ws://") + "/ws", max_size=None, open_timeout=30)
        self.seen: list[str] = []

    def send(self, message: object) -> dict:
        self.ws.send(message if isinstance(message, str | bytes) else json.dumps(message))
        raw = self.ws.recv(timeout=60)
        self.seen.append(raw if isinstance(raw, str) else raw.decode(errors="replace"))
        return json.loads(raw)

    def close(self) -> None:
        self.ws.close()


@pytest.fixture
def raw(server):
    sessions: list[Raw] = []

    def open_session() -> Raw:
        sessions.append(Raw(server))
        return sessions[-1]

    yield open_session
    leaked = [s for r in sessions for text in r.seen for s in secrets() if s in text]
    for r in sessions:
        r.close()
    assert not leaked, f"a client received {leaked}"


def error(reply: dict) -> str:
    assert reply["type"] == "error", reply
    return reply["data"]["message"]


def still_serves(server: str) -> None:
    """The server answers and a fresh session still plays an episode to the checker's reward."""
    assert requests.get(f"{server}/health", timeout=10).json()["status"] == "healthy"
    r = Raw(server)
    try:
        assert r.send({"type": "reset", "data": {"task_id": "age"}})["type"] == "observation"
        done = r.send({"type": "step", "data": {"type": "submit_answer", "answer": round(FEMALE_MEAN_AGE, 2)}})
        assert done["data"]["done"] is True and done["data"]["reward"] == 1.0
    finally:
        r.close()


def test_out_of_order_calls_are_refused(server, raw):
    r = raw()
    assert "reset first" in error(r.send({"type": "step", "data": {"type": "run_code", "code": "print(1)"}}))
    assert r.send({"type": "state"})["data"]["task_id"] is None
    r.send({"type": "reset", "data": {"task_id": "sodium"}})
    wrong = r.send({"type": "step", "data": {"type": "submit_answer", "answer": 1}})["data"]
    assert wrong["done"] and wrong["reward"] == 0.0
    assert "episode is over" in error(r.send({"type": "step", "data": {"type": "submit_answer", "answer": 138.45}}))
    assert "episode is over" in error(r.send({"type": "step", "data": {"type": "run_code", "code": "print(2)"}}))
    # HTTP step is OpenEnv's stateless one: a fresh environment that was never reset; a bare 500, no traceback
    resp = requests.post(f"{server}/step", json={"action": {"type": "submit_answer", "answer": 1}}, timeout=30)
    assert resp.status_code == 500 and all(s not in resp.text for s in secrets())
    still_serves(server)


def test_metadata_state_schema_and_docs_hold_no_answer(server, raw):
    r = raw()
    r.send({"type": "reset", "data": {"task_id": "age"}})
    r.send({"type": "step", "data": {"type": "submit_answer", "answer": "0"}})
    r.send({"type": "state"})
    for path in ("/metadata", "/state", "/schema", "/openapi.json", "/health"):
        text = requests.get(f"{server}{path}", timeout=30).text
        assert all(s not in text for s in secrets()), path
    # MCP, which this environment does not offer, over HTTP and over the session
    for method in ("tools/list", "tools/call"):
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"name": "get_answer", "arguments": {}}}
        assert all(s not in requests.post(f"{server}/mcp", json=body, timeout=30).text for s in secrets())
        r.send({"type": "mcp", "data": body})


def test_crafted_payloads_are_refused_with_fixed_words(server, raw):
    r = raw()
    r.send({"type": "reset", "data": {"task_id": "age", "answer": "?", "reveal": True, "task_root": "/"}})
    assert error(r.send({"type": "step", "data": {"type": "submit_answer", "answer": 1, "grader_reason": True}}))
    assert error(r.send({"type": "step", "data": {"type": "call_tool", "tool_name": "answer", "arguments": {}}}))
    assert error(r.send({"type": "step", "data": {"type": "list_tools"}}))
    assert "field 'code'" in error(r.send({"type": "step", "data": {"type": "run_code", "code": ""}}))
    typed = r.send({"type": "step", "data": {"type": "run_code", "code": 12}})  # OpenEnv's own validation
    assert error(typed) == "Invalid message" and typed["data"]["errors"][0]["loc"] == ["code"]
    assert "unknown message type" in error(r.send({"type": "grade", "data": {}})).lower()
    for data, words in (({"task_id": {"$ne": None}}, "task_id must be a string"),
                        ({"task_id": "../tasks.jsonl"}, "no served task has id '../tasks.jsonl'"),
                        ({"seed": "abc"}, "seed must be a non-negative integer"), ({"seed": -1}, "seed must be"),
                        ({"episode_id": "x" * 10_000}, "episode_id must be a string of at most 255")):
        assert words in error(r.send({"type": "reset", "data": data}))
    # the agent's own code and inspect_data look for the task file: the sandbox holds only the task's data files
    r.send({"type": "reset", "data": {"task_id": "age"}})
    snoop = ("import glob, os\nfor p in glob.glob('/**/tasks.jsonl', recursive=True)[:5]: print(p, open(p).read())\n"
             "print(os.environ)")
    out = r.send({"type": "step", "data": {"type": "run_code", "code": snoop}})["data"]["observation"]["text"]
    assert "tasks.jsonl" not in out
    r.send({"type": "step", "data": {"type": "inspect_data", "path": "../tasks.jsonl"}})
    r.send({"type": "step", "data": {"type": "inspect_data", "path": "/"}})
    still_serves(server)


def test_malformed_and_huge_messages_do_not_bring_the_server_down(server, raw):
    r = raw()
    assert "invalid json" in error(r.send("{not json")).lower()
    assert error(r.send({"data": {}}))
    r.send({"type": "reset", "data": {"task_id": "age"}})
    assert "at most" in error(r.send({"type": "step", "data": {"type": "run_code", "code": "x = 1\n" * 30_000}}))
    assert "at most" in error(r.send({"type": "step", "data": {"type": "submit_answer", "answer": [1] * 40_000}}))
    # nested past the parser's recursion limit: OpenEnv answers with an error and ends that session
    assert "recursion" in error(r.send("[" * 100_000 + "]" * 100_000))
    with pytest.raises(ConnectionClosed):
        r.send({"type": "state"})
    huge = raw()
    with pytest.raises(ConnectionClosed):  # past the message limit (1 MiB): uvicorn closes the connection
        huge.send({"type": "step", "data": {"type": "run_code", "code": "#" * (2 * 1024 * 1024)}})
    big = requests.post(f"{server}/step", data=b"{" * (2 * 1024 * 1024), timeout=30,
                        headers={"content-type": "application/json"})
    assert big.status_code == 413
    chunked = requests.post(f"{server}/step", data=iter([b"{" * 65536] * 40), timeout=30)
    assert chunked.status_code == 413
    still_serves(server)


def test_sessions_past_the_limit_are_refused_until_one_ends(server, raw):
    """Each session holds a sandbox: the server started with --max-sessions 3 refuses a fourth, and frees the slot
    of one that closes."""
    held = [raw() for _ in range(3)]
    for r in held:
        assert r.send({"type": "reset", "data": {"task_id": "age"}})["type"] == "observation"
    extra = Raw(server)
    try:  # the refusal comes unasked, then the connection is closed
        assert json.loads(extra.ws.recv(timeout=30))["data"]["code"] == "CAPACITY_REACHED"
        with pytest.raises(ConnectionClosed):
            extra.send({"type": "state"})
    finally:
        extra.close()
    held.pop().close()
    deadline = time.monotonic() + 30
    while True:  # the server frees the slot once it has seen the close
        try:
            still_serves(server)
            break
        except (AssertionError, ConnectionClosed, KeyError):
            assert time.monotonic() < deadline
            time.sleep(0.5)
