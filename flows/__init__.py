"""Prefect flows and the `medgym` CLI; thin wrappers over `components`."""

from flows.runtime import configure_runtime

configure_runtime()
