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


def test_with_no_home_numba_caches_nothing_rather_than_under_a_folder_named_tilde(monkeypatch):
    real = numba.njit
    asked = []

    def record(*args, **options):
        if not args:
            asked.append(options)
        return real(*args, **options)

    monkeypatch.setattr(numba, "njit", record)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr("os.path.expanduser", lambda p: p)  # as with no HOME and no passwd entry
    njit(cache=True)(lambda: 1)
    assert asked == [{"cache": False}]
