"""The simulated rewriter's sense of difficulty: how it perceives items, reads a target, anchors on
references, and how far its child actually moves (docs/sim-rewriter.md states the model and its sources).

A real LLM has no access to a benchmark's IRT scale. It sees the parent, a number "6.2 out of 10" and,
when the prompt carries them, reference items with their stated difficulties. So the simulated rewriter
decides only from that: it perceives each item it is shown through a monotone distortion of the true
scale (``warp``, ``bias``) plus a fixed per-item error, reads the number on that distorted scale,
anchors on the references that bracket it, and moves a share of the perceived distance from the
parent, with noise and a drift on the logit scale. Invalid children grow with the size of the change.

Presets: ``kind`` is the old behaviour (reads the target on the true scale, moves 0.7 of the way, no
bias, ignores references), ``realistic`` (the default) follows published figures, ``hostile`` is worse
than any model we know of, to show where the search breaks.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from benchfill.errors import ConfigError

# A call's share of the perceived move is drawn about ``share`` and clipped to [0, SHARE_MAX]: a child never
# moves away from what the rewriter aimed at, nor overshoots it by more than half the distance.
SHARE_MAX = 1.5


@dataclass(frozen=True)
class RewriterModel:
    # perception, on the normalized z scale of the original items (0 easiest, 1 hardest)
    bias: float = 0.0  # perceived = true + bias: > 0 sees items as harder than they are (so aims too easy)
    warp: float = 0.0  # > 0 stretches the extremes (outputs bunch toward the middle); < 0 squeezes them
    perception_noise: float = 0.0  # sd of a fixed per-item error in how the rewriter sees an item
    # references: weight on the references that bracket the asked number (0 = ignores them)
    anchor: float = 0.0
    anchor_reach: float = 0.1  # z distance of the bracketing references at which that weight falls by 1/e
    # response
    share: float = 0.7  # mean share of the perceived distance from the parent that the child moves
    share_sd: float = 0.0  # call-to-call spread of that share
    easier_share: float = 1.0  # the share is multiplied by this when the child must get easier
    noise: float = 0.35  # sd of the child's difficulty around where the rewriter meant it, in logits
    easier_noise: float = 1.0  # that sd is multiplied by this when the child must get easier
    drift: float = 0.0  # logits added to every child: > 0, children come out harder than meant
    # validity: P(wrong reference answer) = invalid_base + invalid_slope * |perceived change|, capped
    invalid_base: float = 0.15
    invalid_slope: float = 0.0
    invalid_max: float = 0.9
    # An invalid child's wrong key is a plausible slip: a wrong probe reply gives it with probability
    # slip at the weakest probe, falling linearly with ability to 0 at the strongest (World.p_slip).
    # 0 = the first world's rule: no reply ever matches a wrong key (flat correctness at 0).
    slip: float = 0.5
    # Code: the share of invalid children whose tests were written to their own wrong solution, so that
    # the solution passes them (the others' tests fail it, which running it against them shows at once).
    tests_agree: float = 0.0
    # A parent whose stated answer is wrong (a child the judge missed, taken as a parent): the rewriter sees
    # only that stated answer, so its child keeps the error with this probability, unless it re-solves the
    # item (a judgement call: no published figure). 0 = the first world's rule: every child starts afresh
    # from the parent's true answer, which no rewriter can read.
    inherit_invalid: float = 0.0
    # the judge that goes with this preset
    judge_recall: float = 0.9
    judge_fpr: float = 0.05

    def __post_init__(self) -> None:
        # first: NaN passes every range check below (each comparison is False), and bias, warp and drift have
        # none, so `sim serve --rewriter-knobs bias=nan` served children at NaN difficulty
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"sim rewriter: {f.name} must be a finite number, got {v!r}")
        for name in ("invalid_base", "invalid_max", "judge_recall", "judge_fpr", "slip", "tests_agree",
                     "inherit_invalid"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"sim rewriter: {name} must lie in [0, 1], got {getattr(self, name)}")
        for name in ("perception_noise", "anchor", "share_sd", "noise", "invalid_slope"):
            if getattr(self, name) < 0:
                raise ConfigError(f"sim rewriter: {name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.share <= SHARE_MAX:  # the range a call's drawn share is clipped to (sim/roles.py)
            raise ConfigError(f"sim rewriter: share must lie in [0, {SHARE_MAX:g}], got {self.share}")
        if self.anchor > 1:
            raise ConfigError(f"sim rewriter: anchor must lie in [0, 1], got {self.anchor}")
        if self.anchor_reach <= 0 or self.easier_share < 0 or self.easier_noise <= 0:
            raise ConfigError("sim rewriter: anchor_reach and easier_noise must be > 0, easier_share >= 0")

    # -- perception ------------------------------------------------------------------------------
    def perceive(self, z: float, item_error: float = 0.0) -> float:
        """Where the rewriter places an item of true normalized difficulty ``z``."""
        return 0.5 + self.bias + _warp(z - 0.5, self.warp) + item_error

    def unperceive(self, y: float) -> float:
        """The true z the rewriter's (error-free) perception maps onto ``y``."""
        return 0.5 + _unwarp(y - 0.5 - self.bias, self.warp)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _warp(x: float, w: float) -> float:
    if w > 0:
        return math.sinh(w * x) / w
    if w < 0:
        return math.asinh(-w * x) / -w
    return x


def _unwarp(y: float, w: float) -> float:
    if w > 0:
        return math.asinh(w * y) / w
    if w < 0:
        return math.sinh(-w * y) / -w
    return y


PRESETS: dict[str, RewriterModel] = {
    # The rewriter of the first simulated world: kind in every way a real model is not.
    "kind": RewriterModel(),
    # Each value and its source: docs/sim-rewriter.md. Judgement calls are marked there.
    "realistic": RewriterModel(
        bias=0.03, warp=2.5, perception_noise=0.18, anchor=0.5, anchor_reach=0.1,
        share=0.4, share_sd=0.3, easier_share=0.8, noise=0.8, easier_noise=1.3, drift=0.5,
        invalid_base=0.05, invalid_slope=0.6, judge_recall=0.75, judge_fpr=0.03, tests_agree=0.5,
        inherit_invalid=0.5,
    ),
    "hostile": RewriterModel(
        bias=0.15, warp=2.5, perception_noise=0.2, anchor=0.25, anchor_reach=0.05,
        share=0.35, share_sd=0.3, easier_share=0.6, noise=0.9, easier_noise=1.5, drift=-1.0,
        invalid_base=0.1, invalid_slope=1.0, judge_recall=0.63, judge_fpr=0.1, tests_agree=0.8,
        inherit_invalid=0.8,
    ),
}
DEFAULT_PRESET = "realistic"
KNOBS = tuple(f.name for f in fields(RewriterModel))


def rewriter_model(preset: str | RewriterModel | None = None, **knobs: Any) -> RewriterModel:
    """A preset by name (default ``realistic``), with any knob overridden."""
    if isinstance(preset, RewriterModel):
        base = preset
    else:
        name = preset or DEFAULT_PRESET
        if name not in PRESETS:
            raise ConfigError(f"sim rewriter: unknown preset {name!r} (choose from {', '.join(PRESETS)})")
        base = PRESETS[name]
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise ConfigError(f"sim rewriter: unknown knob {unknown[0]!r} (knobs: {', '.join(KNOBS)})")
    return replace(base, **{k: float(v) for k, v in knobs.items()})


def parse_knobs(text: str | None) -> dict[str, float]:
    """``"bias=0.1,share=0.4"`` -> {"bias": 0.1, "share": 0.4}; a bad pair names itself."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in KNOBS:
            raise ConfigError(f"--rewriter-knobs: {part.strip()!r} is not KNOB=VALUE with a knob of {', '.join(KNOBS)}")
        try:
            out[name] = float(value)
        except ValueError:
            raise ConfigError(f"--rewriter-knobs: {name}={value.strip()!r} is not a number") from None
    return out


# -- reading the prompt ---------------------------------------------------------------------------

_REFERENCE = re.compile(r'<reference difficulty="([^"]*)">(.*?)</reference>', re.DOTALL)


def shown_references(prompt: str) -> list[tuple[float, dict[str, Any]]]:
    """(stated z, item fields) of every ``<reference difficulty="D">`` block the prompt shows.

    The stated number is on the prompt's 0-10 scale; a block whose number or JSON cannot be read is
    skipped, as a model would skip it."""
    out = []
    for number, body in _REFERENCE.findall(prompt):
        try:
            stated = float(number) / 10.0
            obj = json.loads(body)
        except (ValueError, json.JSONDecodeError):
            continue
        if isinstance(obj, dict):
            out.append((stated, obj))
    return out


def anchored_aim(model: RewriterModel, asked: float, refs: list[tuple[float, float]]) -> tuple[float, float]:
    """(aim on the perceived scale, weight given to the references) for an asked z.

    ``refs`` are (stated z, perceived z) of the references shown. The rewriter interpolates its own
    perception of the two references whose stated numbers bracket the ask; with references on one
    side only, it shifts the nearest by the stated difference. The closer the bracket, the more it
    trusts the references over the bare number."""
    if model.anchor <= 0 or not refs:
        return asked, 0.0
    below = [r for r in refs if r[0] <= asked]
    above = [r for r in refs if r[0] >= asked]
    if below and above:
        lo, hi = max(below, key=lambda r: r[0]), min(above, key=lambda r: r[0])
        if hi[0] > lo[0]:
            aim = lo[1] + (asked - lo[0]) / (hi[0] - lo[0]) * (hi[1] - lo[1])
        else:
            aim = (lo[1] + hi[1]) / 2
        dist = max(asked - lo[0], hi[0] - asked)
        weight = model.anchor * math.exp(-dist / model.anchor_reach)
    else:
        near = min(refs, key=lambda r: abs(r[0] - asked))
        aim = near[1] + (asked - near[0])
        # One-sided: the rewriter cannot interpolate, only extrapolate, and trusts it half as much.
        weight = 0.5 * model.anchor * math.exp(-abs(asked - near[0]) / model.anchor_reach)
    return weight * aim + (1 - weight) * asked, weight
