"""How a gap's chosen child is picked among its valid children (Algorithm 2, line 31, and a posterior rule).

"closest" is the paper's: the least annotated deviation from the target, which the selection's
winner's curse favours. "posterior" (the default) weighs each child's annotation against where the
learned response of the rewriter says a child of its parent and ask lands. Either way a child the
order screen flagged is chosen only when no unflagged valid child exists.
"""

from __future__ import annotations

from typing import Any

from benchfill.search.annotate import Annotator
from benchfill.search.screen import prefer_unflagged
from benchfill.search.steering import Steering


def chooser(selection: str, response: Steering, annotator: Annotator):
    """The selection rule by name: "posterior" (default) or "closest" (the paper's)."""
    if selection == "closest":
        return select_closest
    if selection != "posterior":
        from benchfill.errors import ConfigError

        raise ConfigError(f"selection: unknown rule {selection!r} (choose from posterior, closest)")

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
        return (m - target_z) ** 2 + v, c.item_id

    return min(valid, key=loss)


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
    return min(valid, key=lambda c: (c.deviation(target_z), c.item_id))
