"""vLLM servers kept for a whole run: each collection of a pipeline run gets its policy from here.

A vLLM start costs tens of seconds on a CPU (minutes with torch.compile), more than many of the embedded profile's
collections take to play, and the pipeline plays the base model, then each trained model, through the same
settings. So a run keeps one server: a collection asking for another checkpoint of the same shape gets it loaded
in place (VLLMServer.reload: a restart where the weights cannot be swapped), and a collection with other server
settings (context, dtype, ...) replaces the server. The policies handed out never stop the server; close() does.
"""

from __future__ import annotations

import json
from pathlib import Path

from components.policies.models import resolve_model
from components.policies.vllm import VLLMPolicy, VLLMPolicyConfig
from components.policies.vllm_server import VLLMConfig, VLLMServer

# what may differ between two collections served by one server: the checkpoint (reloaded) and the client's knobs
_PER_CHECKPOINT = {"model", "served_model_name"}


class VLLMServers:
    """At most one live vLLM server at a time (this machine's cores and memory hold one); use as a context manager."""

    def __init__(self) -> None:
        self._key: str | None = None
        self._server: VLLMServer | None = None
        self.starts = 0  # servers started, for the run's record
        self.reloads: list[str] = []  # how each change of checkpoint was done: "inplace" or "restart"

    def __enter__(self) -> VLLMServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def policy(self, config: VLLMPolicyConfig) -> VLLMPolicy:
        """A policy on a server of `config`'s settings, serving `config.model`. Attached policies (`base_url`)
        are built as they are: their server is not ours to keep."""
        if config.base_url is not None:
            return VLLMPolicy(config)
        settings = {k: getattr(config, k) for k in VLLMConfig.model_fields}
        key = json.dumps({k: v for k, v in settings.items() if k not in _PER_CHECKPOINT}, sort_keys=True, default=str)
        if self._server is not None and (key != self._key or not self._server.running()):
            self.close()
        if self._server is None:
            self._server, self._key = VLLMServer(VLLMConfig(**settings)), key
            self._server.start()
            self.starts += 1
        else:
            wanted = Path(resolve_model(config.model)).resolve()
            if wanted != self._server.model_dir:
                self.reloads.append(self._server.reload(wanted))
        return VLLMPolicy(config, server=self._server)

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
        self._server = self._key = None
