"""Near-duplicate check of a child against the benchmark's own items.

A rewrite that barely changes its ancestor (or copies another item) would add
a second copy of an existing measurement, not a new one. Flagged for the
reviewer, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class NearDuplicateIndex:
    texts: dict[str, str]  # benchmark item id -> text
    threshold: float = 90.0  # rapidfuzz ratio, 0-100

    def nearest(self, text: str) -> tuple[str | None, float]:
        """The most similar benchmark item and its similarity (0-100)."""
        from rapidfuzz import fuzz, process

        if not self.texts or not text:
            return None, 0.0
        hit = process.extractOne(text, self.texts, scorer=fuzz.ratio)
        if hit is None:
            return None, 0.0
        _text, score, key = hit
        return str(key), float(score)

    def check(self, text: str) -> dict | None:
        """``{"item_id", "similarity"}`` when the text is a near duplicate, else None."""
        key, score = self.nearest(text)
        if key is None or score < self.threshold:
            return None
        return {"item_id": key, "similarity": round(score, 1)}
