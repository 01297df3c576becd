"""Send a batch's requests concurrently and fail the batch on the first error (HTTP backends)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, InvalidStateError, ThreadPoolExecutor, wait
from typing import TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


def all_or_first_error(pool: ThreadPoolExecutor, fn: Callable[[In], Out], items: Sequence[In]) -> list[Out]:
    """`fn` over `items` on `pool`, results in order; the first exception is raised and requests not yet
    started are cancelled (no point sending them for a batch that fails)."""
    return gather([pool.submit(fn, item) for item in items])


def gather(futures: list[Future[Out]]) -> list[Out]:
    """The results of `futures` in order; the first exception is raised and those not yet done are cancelled."""
    done, pending = wait(futures, return_when=FIRST_EXCEPTION)
    failed = next((f for f in futures if f in done and not f.cancelled() and f.exception() is not None), None)
    if failed is not None:
        for f in pending:
            f.cancel()
        raise failed.exception()  # type: ignore[misc]
    return [f.result() for f in futures]


def settle(out: Future[Out], result: Out | None = None, error: BaseException | None = None) -> None:
    """Complete `out` unless its caller already cancelled it (a batch that failed elsewhere)."""
    try:
        if error is not None:
            out.set_exception(error)
        else:
            out.set_result(result)  # type: ignore[arg-type]
    except InvalidStateError:
        pass
