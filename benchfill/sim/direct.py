"""The simulated world answering the search in-process: same prompts, same roles, no HTTP.

``bench/bench_search.py`` sweeps the simulated rewriter over hundreds of (preset, knob, set, seed)
cells; through the loopback server each cell would spend most of its time in HTTP, litellm and
the store, none of which decides how well the search does. Here the product's own prompt templates
and parsers (benchfill.prompts) talk to the world's own role functions (benchfill.sim.roles), so
every rewrite reads the same prompt, references included, and every child is the same kind of
item. What is skipped: the transport, the call cache and the evaluators. A probe's answer is graded
as the evaluators grade the world's replies (math, multiple choice, code): correct only when it
gives the answer the item states: for a wrong-key child, only a wrong reply that makes the slip its
key encodes (``World.graded_correct``, the same rule the server's replies follow).
The run pipeline and the tests keep using the real server.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchfill.evaluators import spec_item_fields
from benchfill.search.services import Reference, Verdict, derive_seed
from benchfill.sim import roles
from benchfill.sim.world import World


class WorldServices:
    """``SearchServices`` over a ``World`` in-process."""

    def __init__(self, world: World, spec, seed: int) -> None:
        self.world, self.spec, self.seed = world, spec, seed
        self.rollout_count = 0

    async def rewrite(self, parent: dict[str, Any], target_z: float, references: list[Reference], key: str):
        from benchfill import prompts

        child_id = key.split(":", 1)[1]
        shown = prompts.content_of(parent, self.spec)
        refs = [(prompts.content_of(r.item, self.spec), r.z) for r in references]
        prompt = prompts.format_rewriter_prompt(shown, target_z, refs, self.spec)
        reply = roles.rewrite(self.world, prompt, roles.prompt_hash(prompt), derive_seed(self.seed, "rewrite", key), 1, [False])[0]
        try:
            child = prompts.parse_child(reply, required=[self.spec.text_field, self.spec.answer_field,
                                                         *spec_item_fields(self.spec)])
        except prompts.MalformedReply:
            return None
        return prompts.new_child(child, child_id, self.spec, parent)

    async def judge(self, child: dict[str, Any], key: str) -> Verdict:
        from benchfill import prompts

        prompt = prompts.format_judge_prompt(prompts.content_of(child, self.spec), self.spec)
        reply = roles.judge(self.world, prompt, roles.prompt_hash(prompt), derive_seed(self.seed, "judge", key), 1)[0]
        valid, reason = prompts.parse_verdict(reply)
        return Verdict(bool(valid), str(reason), self.world.judge_model)

    async def rollouts(self, item_id: str, item: dict[str, Any], probe: str, n: int, key: str) -> int:
        return self.graded(item, probe, n, derive_seed(self.seed, "probe", key))

    def graded(self, item: dict[str, Any], probe: str, n: int, seed: int) -> int:
        sim = self.world.lookup(str(item.get(self.spec.text_field, "")))
        self.rollout_count += n
        if sim is None:
            return 0  # unknown to the world: no reply matches
        w = self.world
        return sum(w.graded_correct(probe, sim, w.uniform(probe, sim.key, seed, i), w.uniform("slip", probe, sim.key, seed, i))
                   for i in range(n))

    def panel_matrix(self, items: list[dict[str, Any]], trials: int = 8):
        """The probe panel's graded rollouts on ``items`` (the benchmark phase of a run)."""
        from benchfill.matrix import ResponseMatrix

        probes = self.world.probes
        seed = derive_seed(self.seed, "benchmark")
        correct = np.array([[self.graded(it, p, trials, seed) for it in items] for p in probes], dtype=np.int64)
        chance = np.array([self.world.lookup(str(it[self.spec.text_field])).chance for it in items])
        return ResponseMatrix(tuple(probes), tuple(str(it["id"]) for it in items), correct,
                              np.full_like(correct, trials), chance, "probe rollouts (in-process sim)")


__all__ = ["WorldServices"]
