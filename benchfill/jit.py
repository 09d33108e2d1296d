"""``njit``: numba's, with its compiled code cached on disk where numba has somewhere to keep it.

``cache=True`` makes numba refuse the function at import ("cannot cache function ...: no locator
available") where neither the package's ``__pycache__`` nor a user cache folder can be written: a
root-owned install run by a user whose ``HOME`` is ``/`` (``docker run --user``), or an unwritable
``XDG_CACHE_HOME``. The run then stopped mid-search. There, the function compiles in memory instead:
each process pays the compile once, as numba's own first run does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    import numba

    def compile_(fn: Callable[..., Any]) -> Any:
        try:
            return numba.njit(**options)(fn)
        except RuntimeError as exc:
            if not options.get("cache") or "cannot cache" not in str(exc):
                raise
            return numba.njit(**{**options, "cache": False})(fn)

    return compile_
