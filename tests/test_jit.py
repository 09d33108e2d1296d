"""numba functions compile in memory where numba has nowhere to cache them (it refused them at import)."""

from __future__ import annotations

import numba
import pytest

from benchfill.jit import njit


def test_a_function_numba_cannot_cache_compiles_in_memory(monkeypatch):
    real = numba.njit
    asked = []

    def no_locator(*args, **options):
        if args:  # numba's own use of njit while it compiles
            return real(*args, **options)
        asked.append(options)
        if options.get("cache"):  # as numba says it with HOME=/ and a root-owned install (docker run --user)
            raise RuntimeError("cannot cache function 'add': no locator available for file '/x/add.py'")
        return real(**options)

    monkeypatch.setattr(numba, "njit", no_locator)

    @njit(cache=True, error_model="numpy")
    def add(a, b):
        return a + b

    assert add(2, 3) == 5
    assert asked == [{"cache": True, "error_model": "numpy"}, {"cache": False, "error_model": "numpy"}]


def test_other_errors_are_not_taken_for_a_missing_cache(monkeypatch):
    def broken(**options):
        raise RuntimeError("something else")

    monkeypatch.setattr(numba, "njit", broken)
    with pytest.raises(RuntimeError, match="something else"):
        njit(cache=True)(lambda: 0)
