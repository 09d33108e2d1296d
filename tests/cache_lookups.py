"""Counting what the call cache is asked for: a resumed run must not look up the calls of rounds it
restored from the store."""

from __future__ import annotations

from benchfill.cache import CallCache


def count_cache_lookups(monkeypatch) -> list[str]:
    """From now on, every key asked of any ``CallCache``, in order (the list fills as the test runs)."""
    asked: list[str] = []
    get_many = CallCache.get_many

    def counting(self, keys):
        keys = list(keys)
        asked.extend(keys)
        return get_many(self, keys)

    monkeypatch.setattr(CallCache, "get_many", counting)
    return asked
