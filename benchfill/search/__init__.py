"""The BenchFill search and the strategies it is compared against.

Public face: ``benchfill_search`` (Algorithm 2), ``baseline_search``,
``oracle_fill``, the ``Annotator`` (fixed/adaptive online calibration and
confirmation), ``Memory`` and ``NearDuplicateIndex``.
"""

from benchfill.search.annotate import PROTOCOLS, AdaptiveSettings, Annotation, Annotator, ConfirmSettings
from benchfill.search.duplicates import NearDuplicateIndex
from benchfill.search.loop import (
    Child,
    GapResult,
    GapSearch,
    SearchSettings,
    benchfill_search,
    select_closest,
)
from benchfill.search.memory import Memory, MemoryEntry
from benchfill.search.services import Probe, Reference, SearchServices, Spend, Verdict, derive_seed
from benchfill.search.strategies import STRATEGIES, baseline_search, oracle_fill

__all__ = [
    "PROTOCOLS",
    "STRATEGIES",
    "AdaptiveSettings",
    "Annotation",
    "Annotator",
    "Child",
    "ConfirmSettings",
    "GapResult",
    "GapSearch",
    "Memory",
    "MemoryEntry",
    "NearDuplicateIndex",
    "Probe",
    "Reference",
    "SearchServices",
    "SearchSettings",
    "Spend",
    "Verdict",
    "baseline_search",
    "benchfill_search",
    "derive_seed",
    "oracle_fill",
    "select_closest",
]
