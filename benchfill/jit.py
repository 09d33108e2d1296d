"""``njit``: numba's, with its compiled code cached on disk where numba has somewhere to keep it.

``cache=True`` makes numba refuse the function at import ("cannot cache function ...: no locator
available") where neither the package's ``__pycache__`` nor a user cache folder can be written: a
root-owned install run by a user whose ``HOME`` is ``/`` (``docker run --user``), or an unwritable
``XDG_CACHE_HOME``. The run then stopped mid-search. There, the function compiles in memory instead:
each process pays the compile once, as numba's own first run does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    import numba

    # With no home (no HOME, no passwd entry) and no NUMBA_CACHE_DIR, numba keeps its cache under a folder
    # literally named "~" in the working directory, which `rm -rf ~` would then be typed to remove
    if options.get("cache") and not os.environ.get("NUMBA_CACHE_DIR") and os.path.expanduser("~") == "~":
        options = {**options, "cache": False}

    def compile_(fn: Callable[..., Any]) -> Any:
        try:
            return numba.njit(**options)(fn)
        except RuntimeError as exc:
            if not options.get("cache") or "cannot cache" not in str(exc):
                raise
            return numba.njit(**{**options, "cache": False})(fn)

    return compile_
