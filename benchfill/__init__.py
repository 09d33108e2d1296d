"""benchfill: measure, repair and ship LLM benchmarks along the difficulty axis.

The public face is small and re-exported lazily, so that ``import benchfill``
costs nothing until a name is used (the CLI's start-up path stays light).
"""

from __future__ import annotations

import importlib
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
}
# Functions that share a name with their module (benchfill.run.run, benchfill.release.release) are
# not re-exported here: importing the module would rebind the package attribute to it.

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'benchfill' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
