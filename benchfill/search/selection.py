"""How a gap's chosen child is picked among its valid children (Algorithm 2, line 31, and a posterior rule).

"closest" is the paper's: the least annotated deviation from the target, which the selection's
winner's curse favours. "posterior" (the default) weighs each child's annotation against where the
learned response of the rewriter says a child of its parent and ask lands. "reduction" takes the same
posterior and asks what the run is scored by instead: the expected top-k gap sum with the child added.
Either way a child the order screen flagged is chosen only when no unflagged valid child exists.
"""

from __future__ import annotations

from typing import Any

from benchfill.search.annotate import Annotator
from benchfill.search.memory import tie_key
from benchfill.search.screen import prefer_unflagged
from benchfill.search.steering import Steering


def chooser(selection: str, response: Steering, annotator: Annotator, scored: Any = None):
    """The selection rule by name: "posterior" (default), "reduction" or "closest" (the paper's).

    ``scored`` is what "reduction" scores a child on, (axis, k, left, right) (``GapSearch.scored``);
    without it, or with k 0, "reduction" is "posterior"."""
    if selection == "closest":
        return select_closest
    if selection not in ("posterior", "reduction"):
        from benchfill.errors import ConfigError

        raise ConfigError(f"selection: unknown rule {selection!r} (choose from posterior, reduction, closest)")
    if selection == "reduction" and scored is not None and scored[1] >= 1:
        axis, k, left, right = scored

        def by_reduction(children: list, target_z: float) -> Any:
            return select_reduction(children, target_z, response, annotator, axis, k, (left, right))

        return by_reduction

    def choose(children: list, target_z: float) -> Any:
        return select_posterior(children, target_z, response, annotator)

    return choose


def _estimate(c: Any, annotator: Annotator) -> tuple[float, float, int]:
    """(z, se, side) a selection trusts: the confirmation where there is one (fresh and more precise).

    ``side`` is +1 when every answer was wrong (or at chance): no finite estimate, and the child sits
    at or beyond the bound ``z``; -1 when every answer was right (at or below it); 0 otherwise."""
    a = c.confirmation if c.confirmation is not None else c.annotation
    side = 0
    if "no_finite_mle" in a.flags:
        side = 1 if ("all_wrong" in a.flags or "at_or_below_chance" in a.flags) else (
            -1 if "all_correct" in a.flags else 0)
    return a.z, annotator.resolution_or_se(a), side


def _posterior(c: Any, target_z: float, response: Steering, annotator: Annotator, tau2: float) -> tuple[float, float]:
    """(mean, variance) of where ``c`` truly lies: its estimate combined with the learned response."""
    z, se, side = _estimate(c, annotator)
    se2 = se**2
    prior = (response.predict(c.parent_z, c.ask, c.parent_id) if c.parent_z is not None and c.ask is not None
             else target_z)
    m = (z / se2 + prior / tau2) / (1 / se2 + 1 / tau2)
    v = 1 / (1 / se2 + 1 / tau2)
    # A child with no finite estimate is known to lie beyond its bound, which its wide se hides: the
    # prior must not pull it back across (an all-wrong child of an end gap, past every probe, was
    # chosen as if it sat on the target, and widened the axis).
    if side > 0:
        m = max(m, z)
    elif side < 0:
        m = min(m, z)
    return m, v


def select_posterior(children: list, target_z: float, response: Steering, annotator: Annotator) -> Any:
    """The valid child with the least expected squared deviation from the target.

    Each child's annotated z (standard error se) is combined with a normal prior at where the
    learned response says a child of its parent and ask lands (spread: the response's residual sd),
    so a child that looks on target only because few rollouts placed it there is pulled back
    toward where children like it land, and an imprecise one pays for its variance. Ties by id."""
    valid = prefer_unflagged([c for c in children if c.valid])  # an order anomaly only if nothing else
    if not valid:
        return None
    _, _, tau = response.response()
    tau2 = max(tau, 0.02) ** 2

    def loss(c: Any) -> tuple[float, str]:
        m, v = _posterior(c, target_z, response, annotator, tau2)
        return tie_key((m - target_z) ** 2 + v), c.item_id  # two siblings answered alike tie

    return min(valid, key=loss)


def select_reduction(children: list, target_z: float, response: Steering, annotator: Annotator,
                     axis: Any, k: int, gap: tuple[float, float]) -> Any:
    """The valid child with the least expected top-k gap sum of ``axis`` with it added.

    The child's true z is taken as normal with ``select_posterior``'s mean and variance. ``axis`` is the
    benchmark's with the run's other gaps split at their targets (``GapSearch.scored``), so a child scores
    the oracle's figure anywhere its gap's larger piece no longer counts among the k widest; only a chance
    of lying outside ``gap``, or beyond an end of the axis, costs it. A landing elsewhere on the axis is
    scored as no change: it would split some other spacing, but this gap stays open, and a wide estimate
    must not earn credit for the chance. Ties (that flat middle) go to the less expected squared deviation,
    then to the id."""

    valid = prefer_unflagged([c for c in children if c.valid])  # an order anomaly only if nothing else
    if not valid:
        return None
    _, _, tau = response.response()
    tau2 = max(tau, 0.02) ** 2

    def loss(c: Any) -> tuple[float, float, str]:
        m, v = _posterior(c, target_z, response, annotator, tau2)
        # rounded: the flat middle's sums differ only by float noise
        return tie_key(_expected_in_gap(axis, k, gap, m, v**0.5)), tie_key((m - target_z) ** 2 + v), c.item_id

    return min(valid, key=loss)


def _expected_in_gap(axis: Any, k: int, gap: tuple[float, float], m: float, sd: float) -> float:
    """E[top-k gap sum of ``axis`` with one item at x], x ~ N(m, sd^2), where a landing outside ``gap`` but
    on [0, 1] counts as no change (``select_reduction``) and one beyond an end as the widening it is."""
    from benchfill.coverage import expected_top_k_change, top_k_gap_sum

    return top_k_gap_sum(axis, k) + expected_top_k_change(axis, m, sd, k, only_in=gap)


def in_range(children: list) -> list:
    """The children whose estimate (confirmed, else annotated) lies on the benchmark's range [0, 1].

    A gap lies between two of the benchmark's items, so a child beyond its easiest or hardest item
    fills none: it opens a new gap at that end of the axis. When no child lands inside a gap, the
    fallback choice is made among these alone, and a gap where none is left stays unfilled rather
    than take an item that widens the coverage (on one simulated humaneval seed whose rewriter
    overshot the top end gap, such a child tripled the true top-3 gap sum). An item added inside
    [0, 1] can only split a gap, never widen one.
    """
    return [c for c in children if (a := c.confirmation or c.annotation) is not None and 0.0 <= a.z <= 1.0]


def select_closest(children: list, target_z: float) -> Any:
    """The valid child whose annotated difficulty is closest to the target (line 31); ties by id."""
    valid = prefer_unflagged([c for c in children if c.valid])  # an order anomaly only if nothing else
    if not valid:
        return None
    return min(valid, key=lambda c: (tie_key(c.deviation(target_z)), c.item_id))
