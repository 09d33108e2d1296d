"""benchfill: measure, repair and ship LLM benchmarks along the difficulty axis.

The public face is small and re-exported lazily, so that ``import benchfill``
costs nothing until a name is used (the CLI's start-up path stays light).
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # what ``__getattr__`` gives at run time, spelled out for type checkers and IDEs (every
    # name read as Any before, so `benchfill.fit(m, engin="nuts")` passed mypy and pyright)
    # The module, as at run time: `benchfill.run.run(opts)` and `benchfill.release.release(...)` type-check as
    # documented (the modules are also callable at run time, which no annotation can say of a module)
    from benchfill import release as release
    from benchfill import run as run
    from benchfill.benchmarks import get_benchmark as get_benchmark
    from benchfill.config import load_config as load_config
    from benchfill.coverage import diagnose as diagnose
    from benchfill.data import read_items as read_items
    from benchfill.data import read_responses as read_responses
    from benchfill.demo import demo_benchmark as demo_benchmark
    from benchfill.errors import BenchfillError as BenchfillError
    from benchfill.irt import leave_one_model_out as leave_one_model_out
    from benchfill.irt import matrix_checks as matrix_checks
    from benchfill.irt import online_calibrate as online_calibrate
    from benchfill.irt.engine import fit as fit  # (benchfill.irt.fit is also a module: the function's home)
    from benchfill.irt.fit import IrtFit as IrtFit
    from benchfill.matrix import ResponseMatrix as ResponseMatrix
    from benchfill.probes import collect_responses as collect_responses
    from benchfill.pruning import calibrate as calibrate
    from benchfill.review import ReviewBoard as ReviewBoard
    from benchfill.run import RunOptions as RunOptions
    from benchfill.store import Store as Store
    from benchfill.sweep import load_sweep as load_sweep
    from benchfill.sweep import run_sweep as run_sweep

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

# Written out, not computed: type checkers read `from benchfill import *` off a literal list only
# (tests/test_public_api.py holds it to _EXPORTS)
__all__ = [
    "BenchfillError", "IrtFit", "ResponseMatrix", "ReviewBoard", "RunOptions", "Store", "calibrate",
    "collect_responses", "demo_benchmark", "diagnose", "fit", "get_benchmark", "leave_one_model_out", "load_config",
    "load_sweep", "matrix_checks", "online_calibrate", "read_items", "read_responses", "release", "run", "run_sweep",
    "__version__",
]  # fmt: skip


if not TYPE_CHECKING:  # hidden from type checkers: a module __getattr__ lets any misspelt name through

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
