"""Remove sandbox containers whose owner process is gone.

Every container carries its owner's pid, start time and host name as labels. A container is an orphan when
its owner on this host no longer runs (or the pid now belongs to another process). Containers of other hosts
sharing the engine are left alone. The containers end themselves too (stdin EOF, lifetime); this catches the
ones that never got that far, e.g. created but not yet started when their owner was killed.
"""

from __future__ import annotations

import socket

import docker
import docker.errors

from components.sandbox.docker_container import (
    LABEL,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_OWNER_START,
    docker_client,
    process_start_ticks,
)


def owner_alive(labels: dict[str, str]) -> bool:
    try:
        pid = int(labels.get(LABEL_OWNER_PID, ""))
    except ValueError:
        return False
    start = process_start_ticks(pid)
    return start is not None and start == labels.get(LABEL_OWNER_START, start)


def reap_orphans(client: docker.DockerClient | None = None) -> int:
    """Force-remove this host's labelled containers whose owner is dead; return how many were removed."""
    client = client or docker_client()
    host = socket.gethostname()
    removed = 0
    for c in client.api.containers(all=True, filters={"label": f"{LABEL}=1"}):
        labels = c.get("Labels") or {}
        if labels.get(LABEL_OWNER_HOST) != host or owner_alive(labels):
            continue
        try:
            client.api.remove_container(c["Id"], force=True)
            removed += 1
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: already being removed (auto-remove)
                raise
    return removed
