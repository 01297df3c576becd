"""The judge: the program that checks a code answer inside the sandbox. Standard library only; the host appends a
call to `main(CONFIG)` and sends the whole file as one execution.

The submission never runs in the judge's process. The judge makes itself non-dumpable (so same-uid code cannot
read its memory or its descriptors through /proc), forks a child per run, gives the child /dev/null for stdout and
stderr and one pipe for its reports, and is the only writer of the execution's stdout: one JSON report, which the
host compares with what it holds. The expected results are never in the sandbox, so nothing the submission prints,
reads, forges or exits with can earn a pass; it has to return the right values.

Two modes:
- `trace` (BioCoder-style): the task's own program runs with the submission inserted and the target function
  wrapped by a recorder. Every call is reported as plain values (arguments before and after, the return value or
  the exception's type, what it printed). The program runs once per seed variant: variant 0 as written, the others
  with every seed it sets mixed with the variant, so that one task checks the function on several inputs.
- `calls` (assert-style tests): the child runs the submission and then serves calls; the judge runs the tests
  itself with proxies whose results come back as plain values, so an object that claims equality with everything
  arrives as its plain value and compares as that.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import io
import json
import math
import os
import pickle
import select
import struct
import sys
import time
import zlib

MAX_REPORT = 8 << 20
MAX_RECORDS = 200
MAX_LEAVES = 20_000
MAX_TEXT = 10_000


# ---------------------------------------------------------------------------------------------- plain values
class _Budget:
    def __init__(self) -> None:
        self.left = MAX_LEAVES


def plain(x: object, budget: _Budget | None = None, depth: int = 0) -> object:
    """A JSON value for `x`, read through the base types' own methods so that a subclass cannot lie about itself."""
    budget = budget or _Budget()
    budget.left -= 1
    if budget.left < 0 or depth > 24:
        return {"cut": True}
    if x is None or type(x) is bool:
        return x
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, int):
        return int.__int__(x)
    if isinstance(x, float):
        v = float.__float__(x)
        return v if math.isfinite(v) else {"float": repr(v)}
    if isinstance(x, complex):
        return {"complex": [plain(complex.__complex__(x).real), plain(complex.__complex__(x).imag)]}
    if isinstance(x, str):
        return str.__str__(x)[:MAX_TEXT]
    if isinstance(x, (bytes, bytearray)):
        return {"bytes": bytes(x[:MAX_TEXT]).hex()}
    mod = type(x).__module__ or ""
    if mod.startswith("numpy"):
        if type(x).__name__ == "ndarray":
            return {"ndarray": str(x.dtype), "shape": list(x.shape), "data": plain(x.tolist(), budget, depth + 1)}
        if hasattr(x, "item"):
            return plain(x.item(), budget, depth + 1)
    if mod.startswith("pandas"):
        kind = type(x).__name__
        if kind == "DataFrame":
            return {"dataframe": plain([str(c) for c in x.columns], budget, depth + 1),
                    "index": plain(list(x.index), budget, depth + 1), "data": plain(x.values.tolist(), budget, depth + 1)}
        if kind == "Series":
            return {"series": plain(list(x.index), budget, depth + 1), "data": plain(x.tolist(), budget, depth + 1)}
    if isinstance(x, (list, tuple)):
        items = [list.__getitem__(x, i) for i in range(list.__len__(x))] if isinstance(x, list) else list(tuple.__iter__(x))
        return [plain(v, budget, depth + 1) for v in items]
    if isinstance(x, (set, frozenset)):
        return {"set": sorted((plain(v, budget, depth + 1) for v in x), key=lambda v: json.dumps(v, sort_keys=True))}
    if isinstance(x, dict):
        pairs = [[plain(k, budget, depth + 1), plain(v, budget, depth + 1)] for k, v in dict.items(x)]
        return {"dict": sorted(pairs, key=lambda kv: json.dumps(kv[0], sort_keys=True))}
    attrs = getattr(x, "__dict__", None)
    name = f"{type(x).__module__}.{type(x).__qualname__}"
    if isinstance(attrs, dict) and depth < 6:
        return {"object": name, "attrs": plain(dict(attrs), budget, depth + 1)}
    return {"object": name}


# ---------------------------------------------------------------------------------------------- child side
def _isolate_child(keep: tuple[int, ...]) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    for fd in range(3, 1024):
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace")
    sys.stderr = sys.stdout


def _mix(seed: object, variant: int) -> int:
    base = seed if isinstance(seed, int) and not isinstance(seed, bool) else zlib.crc32(repr(seed).encode())
    return (int(base) * 1_000_003 + variant * 7_919) % (2**32)


def _vary_seeds(variant: int) -> None:
    """Variant 0 runs the program as written; others mix the variant into every seed it sets (and the start)."""
    if variant == 0:
        return
    import random

    seed0 = random.seed
    random.seed = lambda a=None, *args, **kw: seed0(_mix(a, variant))
    seed0(_mix(None, variant))
    try:
        import numpy as np
    except ImportError:
        return
    np_seed, np_rng, np_state = np.random.seed, np.random.default_rng, np.random.RandomState
    np.random.seed = lambda s=None: np_seed(_mix(s, variant))
    np.random.default_rng = lambda s=None, *a, **k: np_rng(_mix(s, variant), *a, **k)
    np.random.RandomState = lambda s=None: np_state(_mix(s, variant))
    np_seed(_mix(None, variant))


def _recorder(fd: int):  # noqa: ANN202 - returns a decorator
    count = [0]

    def send(record: dict) -> None:
        data = (json.dumps(record) + "\n").encode()
        with contextlib.suppress(OSError):
            os.write(fd, data)

    def record(fn):  # noqa: ANN001, ANN202
        if isinstance(fn, property):
            return property(record(fn.fget), fn.fset, fn.fdel, fn.__doc__)
        if isinstance(fn, (staticmethod, classmethod)):
            return type(fn)(record(fn.__func__))
        import functools
        import inspect

        try:
            params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = []
        bound = bool(params) and params[0] in ("self", "cls")

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            count[0] += 1
            own, rest = (args[:1], args[1:]) if bound else ((), args)
            rec: dict = {"args": plain(list(rest)), "kwargs": plain(kwargs)}
            if own:
                rec["self"] = plain(own[0])
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    result = fn(*args, **kwargs)
            except Exception as exc:
                rec["raises"] = type(exc).__name__
                raise
            else:
                rec["returns"] = plain(result)
                return result
            finally:
                rec["args_after"] = plain(list(rest))
                if own:
                    rec["self_after"] = plain(own[0])
                rec["stdout"] = out.getvalue()[:MAX_TEXT]
                if count[0] <= MAX_RECORDS:
                    send(rec)
                else:
                    send({"more": count[0]})

        return wrapper

    return record


def _trace_child(program: str, variant: int, fd: int) -> None:
    _isolate_child((fd,))
    _vary_seeds(variant)
    namespace = {"__name__": "__main__", "__builtins__": builtins, "_medgym_record": _recorder(fd)}
    with contextlib.suppress(BaseException):
        exec(compile(program, "<program>", "exec"), namespace)  # noqa: S102 - the submission, sandboxed
    os._exit(0)


def _serve_calls_child(code: str, req_fd: int, rep_fd: int) -> None:
    _isolate_child((req_fd, rep_fd))
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(code, "<submission>", "exec"), namespace)  # noqa: S102
        names = sorted(k for k, v in namespace.items() if callable(v) and not k.startswith("__"))
    except BaseException:  # noqa: BLE001
        names = []
    _send_frame(rep_fd, json.dumps({"names": names}).encode())
    while True:
        req = _recv_frame(req_fd, time.monotonic() + 3600)
        if req is None:
            os._exit(0)
        name, args, kwargs = pickle.loads(req)
        try:
            reply = {"returns": plain(namespace[name](*args, **kwargs))}
        except Exception as exc:  # noqa: BLE001
            reply = {"raises": type(exc).__name__}
        _send_frame(rep_fd, json.dumps(reply).encode())


# ---------------------------------------------------------------------------------------------- judge side
def _send_frame(fd: int, data: bytes) -> None:
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int, deadline: float) -> bytes | None:
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _recv_frame(fd: int, deadline: float) -> bytes | None:
    head = _read_exact(fd, 4, deadline)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    return None if n > MAX_REPORT else _read_exact(fd, n, deadline)


def _run_trace(program: str, variants: int, deadline: float) -> list[list[dict]]:
    runs = []
    for variant in range(variants):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            _trace_child(program, variant, w)
        os.close(w)
        data, complete = b"", True
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                complete = False
                break
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            data += chunk
            if len(data) > MAX_REPORT:
                complete = False
                break
        os.close(r)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
        os.waitpid(pid, 0)
        records = []
        for line in data.splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if isinstance(rec, dict):
                    records.append(rec)
        runs.append(records if complete else [{"incomplete": True}])
    return runs


def _run_calls(code: str, tests: str, deadline: float) -> dict:
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(req_w)
        os.close(rep_r)
        _serve_calls_child(code, req_r, rep_w)
    os.close(req_r)
    os.close(rep_w)
    try:
        hello = _recv_frame(rep_r, deadline)
        names = json.loads(hello)["names"] if hello else []

        class Refused(Exception):  # noqa: N818 - the name the tests see
            pass

        def proxy(name: str):  # noqa: ANN202
            def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
                _send_frame(req_w, pickle.dumps((name, args, kwargs)))
                raw = _recv_frame(rep_r, deadline)
                if raw is None:
                    raise Refused(f"{name} did not answer")
                reply = json.loads(raw)
                if "raises" in reply:
                    raise Refused(f"{name} raised {reply['raises']}")
                return reply["returns"]

            return call

        scope = {"__name__": "__main__", "__builtins__": builtins, **{n: proxy(n) for n in names}}
        try:
            exec(compile(tests, "<tests>", "exec"), scope)  # noqa: S102 - the task's own tests, trusted
        except BaseException as exc:  # noqa: BLE001
            tb = exc.__traceback__
            line = 0
            while tb is not None:
                if tb.tb_frame.f_code.co_filename == "<tests>":
                    line = tb.tb_lineno
                tb = tb.tb_next
            # the exception's type and the test's line only: a message could quote the expected value
            return {"passed": False, "failed": type(exc).__name__, "line": line}
        return {"passed": True}
    finally:
        os.close(req_w)
        os.close(rep_r)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
        os.waitpid(pid, 0)


def main(config: dict) -> None:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the child cannot open /proc/<judge>/{mem,fd}
    out = os.dup(1)
    deadline = time.monotonic() + float(config["timeout_s"])
    if config["mode"] == "trace":
        report = {"runs": _run_trace(config["program"], int(config["variants"]), deadline)}
    else:
        report = _run_calls(config["code"], config["tests"], deadline)
    os.write(out, (json.dumps(report) + "\n").encode())
    os._exit(0)
