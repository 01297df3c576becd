"""Great Expectations, imported once, offline and quiet, for every suite in the project."""

from __future__ import annotations

import functools
import logging
import os
from typing import Any


@functools.cache
def quiet_gx() -> Any:
    """great_expectations, imported offline (no analytics) and quiet: its parent logger is raised before the
    import, which logs, and after it the modules that set their own logger to INFO (the ephemeral context logs
    every temp dir it makes)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx

    for name, logger in logging.root.manager.loggerDict.items():
        if name.startswith("great_expectations") and isinstance(logger, logging.Logger) and logging.NOTSET < logger.level < logging.WARNING:
            logger.setLevel(logging.WARNING)
    return gx
