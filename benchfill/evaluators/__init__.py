"""Graders registered by name: ``math``, ``multiple_choice``, ``code``.

    from benchfill.evaluators import get_evaluator
    ev = get_evaluator("math")
    ev.grade(response, item, spec)  # -> Grade(correct, extracted, reason)

Adding a grader: subclass ``Evaluator`` and decorate it with ``@register("name")``
in any module imported before ``get_evaluator("name")`` is called (a benchmark
plugin, a conftest, the user's script):

    from benchfill.evaluators import Evaluator, Grade, register

    @register("exact_match")
    class ExactMatch(Evaluator):
        def grade(self, response, item, spec=None):
            ok = response.strip() == str(item["answer"]).strip()
            return Grade(ok, response.strip(), "exact match" if ok else "mismatch")

The built-in graders register on import of this package; their heavy parts
(math-verify, the sandbox) start only when first used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from benchfill.errors import ConfigError
from benchfill.evaluators.base import Evaluator, Grade, field_name

__all__ = ["EVALUATORS", "Evaluator", "Grade", "evaluator_for_run", "field_name", "get_evaluator", "isolation_of",
           "register", "require_confinement", "spec_item_fields"]

# name -> Evaluator subclass (or any zero-argument-compatible factory returning one)
EVALUATORS: dict[str, Callable[..., Evaluator]] = {}

_BUILTIN_MODULES = {
    "math": "benchfill.evaluators.math_answers",
    "multiple_choice": "benchfill.evaluators.multiple_choice",
    "code": "benchfill.evaluators.code_tests",
}


def register(name: str) -> Callable[[Callable[..., Evaluator]], Callable[..., Evaluator]]:
    """Class decorator: make an evaluator available as ``get_evaluator(name)``."""

    def decorate(factory: Callable[..., Evaluator]) -> Callable[..., Evaluator]:
        if isinstance(factory, type):
            factory.name = name
        EVALUATORS[name] = factory
        return factory

    return decorate


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES.values():
        importlib.import_module(module)


def _factory(name: str) -> Callable[..., Evaluator]:
    factory = EVALUATORS.get(name)
    if factory is None:
        raise ConfigError(f"evaluator: unknown name {name!r} (known: {', '.join(sorted(EVALUATORS))})")
    return factory


def get_evaluator(name: str, **options: Any) -> Evaluator:
    """A fresh evaluator for ``name``; ``options`` go to its constructor (``code`` takes ``timeout``, the
    seconds a generated program may run; ``math`` and ``multiple_choice`` take none)."""
    factory = _factory(name)
    try:
        return factory(**options)
    except TypeError as exc:
        raise ConfigError(f"evaluator {name!r}: bad options {sorted(options)}: {exc}") from None


def spec_item_fields(spec: Any) -> list[str]:
    """The item fields the spec's grader reads beyond the answer (``Evaluator.item_fields``), by the spec's
    names; ``ConfigError`` for a grader no one registered."""
    factory = _factory(spec.evaluator)
    return [field_name(spec, attr, default) for attr, default in getattr(factory, "item_fields", ())]


def isolation_of(name: str) -> str | None:
    """How the grader ``name`` confines the programs it runs ("bubblewrap" or "unconfined"), or
    None when it runs none: what a run records in its report and review queue."""
    return get_evaluator(name).isolation()


def require_confinement(name: str, allow_unconfined: bool = False) -> str | None:
    """``isolation_of(name)``, refusing with one line (``sandbox.Unconfined``, saying why there is no
    confinement) when the grader would run programs unconfined and neither ``allow_unconfined`` nor
    the user's ``BENCHFILL_ALLOW_UNCONFINED=1`` allows it. It changes nothing: the permission reaches the
    grader through ``evaluator_for_run``, not through this process's environment, so it ends with the run."""
    from benchfill.evaluators import sandbox

    found = isolation_of(name)
    if found == "unconfined" and not (allow_unconfined or sandbox.unconfined_allowed()):
        raise sandbox.Unconfined(f"{name} grader: {sandbox.refusal() or sandbox.UNCONFINED_REFUSAL}")
    return found


def evaluator_for_run(name: str, allow_unconfined: bool = False) -> Evaluator:
    """``get_evaluator(name)`` for one run, carrying that run's permission to run programs unconfined as
    an attribute of its own (pickled with it to the grading workers): a later run in the same process
    (a notebook) is not allowed by an earlier one."""
    evaluator = get_evaluator(name)
    if allow_unconfined:
        evaluator.allow_unconfined = True
    return evaluator


_load_builtins()
