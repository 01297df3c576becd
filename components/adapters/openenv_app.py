"""The OpenEnv server of MedGym's coding tasks: OpenEnv's FastAPI app (HTTP reset/step/state/schema/health and the
WebSocket sessions its clients play through) around `MedGymEnvironment`, served by uvicorn.

OpenEnv's Gradio web UI is left out (`create_fastapi_app`, not `create_app`): it needs gradio and would show a
browser the same session API. Bounds a hostile client meets: sessions at once and their idle time (OpenEnv's
ConcurrencyConfig; a session holds a sandbox), the size of an HTTP body and of a WebSocket message (below, and
uvicorn's ws_max_size), the size of an action (ServedTasks.max_action_chars).
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

from fastapi import FastAPI, HTTPException
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.types import ConcurrencyConfig
from pydantic import BaseModel, ConfigDict, Field

from components.adapters.openenv_env import MedGymEnvironment
from components.adapters.openenv_models import MedGymAction, MedGymObservation
from components.adapters.served import ServedTasks, TaskBook

log = logging.getLogger(__name__)


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field(default="127.0.0.1", description="loopback by default: the server runs code for whoever connects")
    port: int = Field(default=8000, ge=0, le=65535, description="0: any free port")
    max_sessions: int = Field(default=4, ge=1, description="WebSocket sessions at once, each with its own sandbox")
    session_idle_s: float = Field(default=600.0, gt=0, description="a session idle this long is closed")
    max_message_bytes: int = Field(default=1024 * 1024, ge=64 * 1024, description="largest HTTP body or WebSocket message")


def create_server_app(settings: ServedTasks, config: ServeConfig | None = None) -> FastAPI:
    config = config or ServeConfig()
    book = TaskBook(settings)  # read (and checked) once, before the first client
    app = create_fastapi_app(
        functools.partial(MedGymEnvironment, book, settings), MedGymAction, MedGymObservation,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=config.max_sessions,
                                             session_timeout=config.session_idle_s),
    )
    app.title = "MedGym coding environment (OpenEnv)"
    return BodyLimit(app, config.max_message_bytes)


class BodyLimit:
    """ASGI middleware: an HTTP request whose body passes `limit` bytes gets 413 before the app reads it whole
    (uvicorn reads any size; the WebSocket side is bounded by uvicorn's ws_max_size)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    def __getattr__(self, name: str) -> Any:  # routes, title and the rest of the FastAPI app, for callers and tests
        return getattr(self.app, name)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await self._refuse(send)
        seen = 0

        async def bounded() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:  # chunked, no length announced: FastAPI turns this into the response
                raise HTTPException(status_code=413, detail=f"request body over {self.limit} bytes")
            return message

        await self.app(scope, bounded, send)

    async def _refuse(self, send: Any) -> None:
        body = json.dumps({"detail": f"request body over {self.limit} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def serve(settings: ServedTasks, config: ServeConfig | None = None) -> None:
    """Run the server until interrupted."""
    import uvicorn

    config = config or ServeConfig()
    app = create_server_app(settings, config)
    log.info("serving %s on %s:%d", settings.tasks, config.host, config.port)
    uvicorn.run(app, host=config.host, port=config.port, ws_max_size=config.max_message_bytes, log_level="info")
