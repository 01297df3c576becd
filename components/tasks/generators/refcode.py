"""Turn module-level reference functions into a task's self-contained `reference_code` program.

The stored answer and the program come from the same function objects: the generator calls the function
in-process for `Task.answer` and embeds `inspect.getsource` of it in the program, so they cannot disagree.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any


class RefProgram:
    """Source of some functions plus their imports; `render(call)` appends the call that prints the answer."""

    def __init__(self, imports: Sequence[str], funcs: Sequence[Callable[..., Any]]):
        # getsource is slow (it re-reads and tokenises the module), so do it once per generator run
        parts = [*imports, "", ""]
        parts.extend(inspect.getsource(f).rstrip() + "\n\n" for f in funcs)
        self._head = "\n".join(parts)

    def render(self, func_name: str, *args: Any, **kwargs: Any) -> str:
        parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
        call = f"{func_name}({', '.join(parts)})"
        return f"{self._head}\nimport json\n\nprint(json.dumps({call}))\n"
