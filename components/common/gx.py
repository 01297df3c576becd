"""Great Expectations, imported once, offline and quiet, and the one way every suite in the project is run."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable
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


def validate_frame(frame: Any, suite: str, asset: str, expectations: Callable[[Any], Iterable[Any]]) -> Any:
    """One Great Expectations run of the suite `suite` over every row of `frame` (a pandas DataFrame, its asset named
    `asset`): `expectations(gx.expectations)` makes the suite's expectations. An ephemeral context with no progress
    bars; the result in the COMPLETE format, so a failed expectation lists the indexes of its unexpected rows."""
    gx = quiet_gx()
    context = gx.get_context(mode="ephemeral")  # before the suite: adding expectations needs an active context
    context.variables.progress_bars = {"globally": False}
    checks = gx.ExpectationSuite(name=suite)
    for expectation in expectations(gx.expectations):
        checks.add_expectation(expectation)
    batches = context.data_sources.add_pandas("medgym").add_dataframe_asset(asset).add_batch_definition_whole_dataframe("all")
    return batches.get_batch(batch_parameters={"dataframe": frame}).validate(checks, result_format={"result_format": "COMPLETE"})
