"""uvicorn for benchfill's own local servers (the simulated world, the review page), as a guest in its host.

``uvicorn.Config`` configures logging for the whole process when it is made: ``dictConfig`` over the
"uvicorn", "uvicorn.error" and "uvicorn.access" loggers, and ``access_log=False`` takes every handler off
the last. A host application that serves its own ASGI app under uvicorn and runs benchfill (a job service,
a notebook) lost its access log and its handlers for good. Here they are put back as they were.
"""

from __future__ import annotations

import logging
from typing import Any

_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def quiet_config(app: Any, **kw: Any):
    """``uvicorn.Config(app, log_level="warning", access_log=False, **kw)``, the host's uvicorn loggers
    (handlers, level, propagation, filters) left as they were before."""
    import uvicorn

    saved = [(lg, list(lg.handlers), lg.level, lg.propagate, list(lg.filters), lg.disabled)
             for lg in map(logging.getLogger, _LOGGERS)]
    try:
        return uvicorn.Config(app, log_level="warning", access_log=False, **kw)
    finally:
        # as they were, set up or not: left as uvicorn's dictConfig made them, a host that configured logging
        # after a run (basicConfig) and served its own app with log_config=None lost its uvicorn lines
        for lg, handlers, level, propagate, filters, disabled in saved:
            lg.handlers[:], lg.filters[:] = handlers, filters
            lg.setLevel(level)
            lg.propagate, lg.disabled = propagate, disabled
