"""Difficulty annotation of a new item by online calibration (Section 4.1), fixed or adaptive.

Probe abilities stay fixed at the original fit; only the new item's difficulty
is estimated, with the benchmark's guessing floor for multiple choice. The
fixed protocol is the paper's: every probe answers K_j times. The adaptive one
spends rollouts where they carry information (probes whose ability is near the
current estimate), stops early on a child clearly farther from the target than
the best item already found, and stops once the estimate is precise enough.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchfill.search.services import Probe, SearchServices

PROTOCOLS = ("fixed", "adaptive")


@dataclass
class Annotation:
    difficulty: float  # b on the benchmark's logit scale
    se: float
    z: float
    z_se: float
    rollouts: int
    results: list[dict[str, Any]] = field(default_factory=list)  # per probe: probe, ability, correct, trials
    flags: list[str] = field(default_factory=list)
    stop: str = ""  # why the protocol stopped ("budget", "precise", "far", "fixed")

    def to_dict(self) -> dict[str, Any]:
        return {
            "difficulty": self.difficulty,
            "se": self.se,
            "z": self.z,
            "z_se": self.z_se,
            "rollouts": self.rollouts,
            "probe_results": self.results,
            "flags": self.flags,
            "stop": self.stop,
        }


@dataclass(frozen=True)
class AdaptiveSettings:
    batch: int = 8  # samples per probe per step
    width: int = 2  # probes asked per step (the most informative ones)
    min_rollouts: int = 16  # before any early stop
    z_se_stop: float = 0.04  # precise enough on the normalized scale
    far_sigmas: float = 2.0  # "clearly far": this many standard errors beyond the margin


@dataclass
class Annotator:
    """Places items on a fitted scale: ``b_min``/``b_max`` fix the normalization."""

    services: SearchServices
    probes: list[Probe]
    chance: float
    b_min: float
    b_max: float
    protocol: str = "adaptive"
    adaptive: AdaptiveSettings = field(default_factory=AdaptiveSettings)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            from benchfill.errors import ConfigError

            raise ConfigError(f"--annotation: unknown protocol {self.protocol!r} (choose from {', '.join(PROTOCOLS)})")
        self.probes = sorted(self.probes, key=lambda p: p.name)

    @property
    def span(self) -> float:
        return max(self.b_max - self.b_min, 1e-9)

    @property
    def fixed_budget(self) -> int:
        return sum(p.trials for p in self.probes)

    def to_z(self, b: float) -> float:
        return (b - self.b_min) / self.span

    async def annotate(
        self, item_id: str, item: dict[str, Any], key: str, target_z: float | None = None, margin: float = math.inf
    ) -> Annotation:
        """Annotate with the configured protocol; ``margin`` is how far from the target a child may
        sit and still matter (the best deviation known when its round began)."""
        if self.protocol == "fixed" or target_z is None:
            return await self.fixed(item_id, item, key)
        return await self._adaptive(item_id, item, key, target_z, margin)

    async def fixed(self, item_id: str, item: dict[str, Any], key: str) -> Annotation:
        counts = await asyncio.gather(
            *(self.services.rollouts(item_id, item, p.name, p.trials, f"{key}:{p.name}:0") for p in self.probes)
        )
        correct = {p.name: int(c) for p, c in zip(self.probes, counts, strict=True)}
        trials = {p.name: p.trials for p in self.probes}
        ann = self._estimate(correct, trials)
        ann.stop = "fixed"
        return ann

    async def _adaptive(
        self, item_id: str, item: dict[str, Any], key: str, target_z: float, margin: float
    ) -> Annotation:
        s = self.adaptive
        correct = {p.name: 0 for p in self.probes}
        trials = {p.name: 0 for p in self.probes}
        asked = {p.name: 0 for p in self.probes}
        # Start where the rewriter aimed: the target is the best prior guess for the child.
        b = self.b_min + target_z * self.span
        budget = self.fixed_budget
        ann: Annotation | None = None
        while sum(trials.values()) < budget:
            room = budget - sum(trials.values())
            chosen = self._most_informative(b, s.width)
            sizes = _split(room, [min(s.batch, room)] * len(chosen))
            calls = [
                self.services.rollouts(item_id, item, p.name, n, f"{key}:{p.name}:{asked[p.name]}")
                for p, n in zip(chosen, sizes, strict=True)
                if n > 0
            ]
            got = await asyncio.gather(*calls)
            for p, n, c in zip([p for p, n in zip(chosen, sizes, strict=True) if n > 0], [n for n in sizes if n > 0], got, strict=True):
                correct[p.name] += int(c)
                trials[p.name] += n
                asked[p.name] += 1
            ann = self._estimate(correct, trials)
            b = ann.difficulty
            if sum(trials.values()) < s.min_rollouts:
                continue
            if ann.z_se <= s.z_se_stop:
                ann.stop = "precise"
                return ann
            if abs(ann.z - target_z) - s.far_sigmas * ann.z_se > margin:
                ann.stop = "far"
                return ann
        assert ann is not None
        ann.stop = "budget"
        return ann

    def _most_informative(self, b: float, width: int) -> list[Probe]:
        """Probes with the largest Fisher information at difficulty ``b`` (3PL with a=1)."""

        def info(p: Probe) -> float:
            q = 1.0 / (1.0 + math.exp(-(p.ability - b)))
            prob = self.chance + (1 - self.chance) * q
            # Fisher information of one Bernoulli answer for b under the guessing model.
            return ((1 - self.chance) * q * (1 - q)) ** 2 / max(prob * (1 - prob), 1e-12)

        return sorted(self.probes, key=lambda p: (-info(p), p.name))[:width]

    def _estimate(self, correct: dict[str, int], trials: dict[str, int]) -> Annotation:
        try:
            from benchfill.irt import online_calibrate
        except ImportError:  # the package face may not re-export it
            from benchfill.irt.online import online_calibrate

        used = [p for p in self.probes if trials[p.name] > 0]
        c = np.array([correct[p.name] for p in used], dtype=float)
        k = np.array([trials[p.name] for p in used], dtype=float)
        theta = np.array([p.ability for p in used], dtype=float)
        est = online_calibrate(c, k, theta, chance=self.chance)
        b = float(est.difficulty)
        se = float(est.se) if est.se is not None and np.isfinite(est.se) else math.inf
        flags = list(getattr(est, "flags", []) or [])
        z = self.to_z(b)
        if not 0.0 <= z <= 1.0:
            flags.append("outside_range")
        results = [
            {"probe": p.name, "ability": p.ability, "correct": correct[p.name], "trials": trials[p.name]} for p in used
        ]
        return Annotation(b, se, z, se / self.span, int(k.sum()), results, sorted(set(flags)))


def _split(room: int, sizes: list[int]) -> list[int]:
    """Trim a step's batch sizes so the total never exceeds the remaining budget."""
    out = []
    for n in sizes:
        take = min(n, room)
        out.append(take)
        room -= take
    return out
