"""The simulated world: a seeded, OpenAI-compatible stand-in for probe models, rewriter and judge.

Labelled as simulated wherever its truth is shown. ``World`` holds the truth;
``SimServer`` serves it over HTTP on loopback (in-process), ``benchfill sim serve``
in its own process.
"""

from __future__ import annotations

from benchfill.sim.server import SimApp, SimServer
from benchfill.sim.world import SimItem, World

__all__ = ["SimApp", "SimItem", "SimServer", "World"]
