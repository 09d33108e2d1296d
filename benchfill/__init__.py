"""benchfill: measure, repair and ship LLM benchmarks along the difficulty axis.

The public face is small and re-exported lazily, so that ``import benchfill``
costs nothing until a name is used (the CLI's start-up path stays light).
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "BenchfillError": "benchfill.errors",
    "ResponseMatrix": "benchfill.matrix",
    "IrtFit": "benchfill.irt.fit",
    "read_items": "benchfill.data",
    "read_responses": "benchfill.data",
    "fit": "benchfill.irt",
    "matrix_checks": "benchfill.irt",
    "leave_one_model_out": "benchfill.irt",
    "online_calibrate": "benchfill.irt",
    "diagnose": "benchfill.coverage",
    "calibrate": "benchfill.pruning",
    "demo_benchmark": "benchfill.demo",
    "load_config": "benchfill.config",
    "get_benchmark": "benchfill.benchmarks",
    "collect_responses": "benchfill.probes",
    "RunOptions": "benchfill.run",
    "load_sweep": "benchfill.sweep",
    "run_sweep": "benchfill.sweep",
    "Store": "benchfill.store",
    "ReviewBoard": "benchfill.review",
    # Functions named like their module: the attribute is the module, which calls the function
    # (``calling_module``), because importing a submodule binds it on the package over anything else.
    "run": "benchfill.run",
    "release": "benchfill.release",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'benchfill' has no attribute {name!r}")
    value = importlib.import_module(module)
    if module != f"benchfill.{name}":
        value = getattr(value, name)
    globals()[name] = value
    return value


def calling_module(fn: Callable[..., Any]) -> type[types.ModuleType]:
    """A module class whose modules call ``fn``: ``benchfill.run(opts)`` and ``benchfill.release(...)``
    work whichever way the module was first imported (the reference's module ``__class__`` swap)."""

    class CallingModule(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

    return CallingModule


def __dir__() -> list[str]:
    return __all__
