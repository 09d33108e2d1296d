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


def _estimate(c: Any, annotator: Annotator) -> tuple[float, float]:
    """(z, se) a selection trusts: the confirmation where there is one (fresh and more precise)."""
    if c.confirmation is not None:
        return c.confirmation.z, annotator.resolution_or_se(c.confirmation)
    return c.annotation.z, annotator.resolution_or_se(c.annotation)


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
        z, se = _estimate(c, annotator)
        se2 = se**2
        prior = (response.predict(c.parent_z, c.ask, c.parent_id) if c.parent_z is not None and c.ask is not None
                 else target_z)
        m = (z / se2 + prior / tau2) / (1 / se2 + 1 / tau2)
        v = 1 / (1 / se2 + 1 / tau2)
        return (m - target_z) ** 2 + v, c.item_id

    return min(valid, key=loss)


def select_closest(children: list, target_z: float) -> Any:
    """The valid child whose annotated difficulty is closest to the target (line 31); ties by id."""
    valid = prefer_unflagged([c for c in children if c.valid])  # an order anomaly only if nothing else
    if not valid:
        return None
    return min(valid, key=lambda c: (c.deviation(target_z), c.item_id))
