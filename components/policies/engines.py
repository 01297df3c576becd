"""vLLM servers kept for a whole run: each collection of a pipeline run gets its policy from here.

A vLLM start costs tens of seconds on a CPU (minutes with torch.compile), more than many of the embedded profile's
collections take to play, and the pipeline plays the base model, then each trained model, through the same
settings. So a run keeps one set of engines (`engines` servers, one per GPU or tensor-parallel group): a collection
asking for another checkpoint of the same shape gets it loaded in place on every engine (VLLMServer.reload: a
restart where the weights cannot be swapped), and a collection with other server settings (context, dtype, engine
count, ...) replaces them. The policies handed out never stop the servers; close() does.

A start is mostly single-threaded imports (about 10 of its 13 s on a CPU): prestart() begins one in the background,
for a caller that knows which settings the next collection plays, so that it overlaps work that leaves a core free.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from components.policies.models import resolve_model
from components.policies.vllm import VLLMPolicy, VLLMPolicyConfig
from components.policies.vllm_engines import start_all, stop_all
from components.policies.vllm_server import VLLMConfig, VLLMServer

# what may differ between two collections served by one set of servers: the checkpoint (reloaded) and the client's knobs
_PER_CHECKPOINT = {"model", "served_model_name"}
_PER_RUN = (*VLLMConfig.model_fields, "engines", "devices")

log = logging.getLogger(__name__)


class VLLMServers:
    """At most one live set of vLLM engines at a time; use as a context manager."""

    def __init__(self) -> None:
        # collections that run side by side (pipeline.side_by_side) ask from their own threads
        self._lock = threading.RLock()
        self._key: str | None = None
        self._servers: list[VLLMServer] = []
        self.starts = 0  # servers started, for the run's record
        self.reloads: list[str] = []  # how each change of checkpoint was done: "inplace" or "restart"

    def __enter__(self) -> VLLMServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def policy(self, config: VLLMPolicyConfig) -> VLLMPolicy:
        """A policy on engines of `config`'s settings, serving `config.model`. Attached policies (`base_url`)
        are built as they are: their servers are not ours to keep."""
        if config.base_url is not None:
            return VLLMPolicy(config)
        with self._lock:
            self._serve(config)
            return VLLMPolicy(config, servers=self._servers)

    def prestart(self, config: VLLMPolicyConfig) -> None:
        """Start engines for `config` in a background thread (none for an attached policy); a policy() or close()
        meanwhile waits for that start. A start that fails is logged, and the next policy() tries again and raises."""
        if config.base_url is not None:
            return

        def start() -> None:
            with self._lock:
                try:
                    self._serve(config)
                except Exception as exc:  # noqa: BLE001 (the caller's own policy() call starts again and says why)
                    log.warning("vLLM engines for %s did not start ahead of their collection: %s", config.model, exc)

        threading.Thread(target=start, name="vllm-prestart", daemon=True).start()

    def _serve(self, config: VLLMPolicyConfig) -> None:
        settings = {k: getattr(config, k) for k in _PER_RUN}
        key = json.dumps({k: v for k, v in settings.items() if k not in _PER_CHECKPOINT}, sort_keys=True, default=str)
        if self._servers and (key != self._key or not all(s.running() for s in self._servers)):
            self.close()
        if not self._servers:
            servers = [VLLMServer(c) for c in config.server_configs()]
            start_all(servers)
            self._servers, self._key = servers, key
            self.starts += len(servers)
        else:
            wanted = Path(resolve_model(config.model)).resolve()
            hows = [server.reload(wanted) for server in self._servers if wanted != server.model_dir]
            if hows:
                self.reloads.append("restart" if "restart" in hows else "inplace")

    def close(self) -> None:
        with self._lock:
            stop_all(self._servers)
            self._servers, self._key = [], None
