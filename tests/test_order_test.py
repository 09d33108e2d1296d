"""The order-consistency screen (benchfill.measure.order_test): size, power, caching, one-item call."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.measure import order_test
from benchfill.measure.order_test import calibration, lr_statistic, order_consistency, reference_profiles

N, T = 8, 10  # an eight-probe axis with ten trials per probe


def _monotone_items(rng: np.random.Generator, n_items: int) -> np.ndarray:
    """True correctness along the axis from 2PL-like curves with a chance floor, plus flat ones."""
    pos = np.linspace(0, 1, N)
    b = rng.uniform(-0.3, 1.3, size=(n_items, 1))
    a = rng.uniform(0.0, 12.0, size=(n_items, 1))  # a = 0 is a flat item
    g = rng.choice([0.0, 0.1, 0.25], size=(n_items, 1))
    return g + (1 - g) / (1 + np.exp(-a * (pos - b)))


def test_monotone_items_are_flagged_at_most_alpha(tmp_path):
    # 3000 items simulated from monotone profiles, none of them one of the reference vectors:
    # the share flagged at .05 stays within .05 + 3 Monte Carlo standard errors (0.0619).
    rng = np.random.default_rng(11)
    theta = _monotone_items(rng, 3000)
    k = rng.binomial(T, theta)
    cal = calibration([T] * N, cache_dir=tmp_path)
    o = cal.p_value(lr_statistic(k, np.full(N, T)))
    rate = float(np.mean(o <= 0.05))
    assert rate <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 3000), rate
    # the flat profile at .5, the least favourable null, also holds the level
    kf = rng.binomial(T, 0.5, size=(3000, N))
    rate_flat = float(np.mean(cal.p_value(lr_statistic(kf, np.full(N, T))) <= 0.05))
    assert rate_flat <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 3000), rate_flat


def test_injected_reversal_is_flagged_most_of_the_time(tmp_path):
    # A wrong-key item: correctness rises with strength until the strongest three probes,
    # which give the "real" answer and so fail the wrong key (correctness .9 -> .1).
    # The screen flags it in well over 80% of 1000 simulated items (observed 98.3%; monotone
    # items above: 0.4% flagged, flat-at-.5 items 4.6%).
    rng = np.random.default_rng(12)
    theta = _monotone_items(rng, 1000) * 0.8 + 0.1
    theta = np.clip(theta, 0.6, None)
    theta[:, -3:] = 0.1
    k = rng.binomial(T, theta)
    o = calibration([T] * N, cache_dir=tmp_path).p_value(lr_statistic(k, np.full(N, T)))
    assert np.mean(o <= 0.05) >= 0.8


def test_p_value_has_the_add_one_floor_and_counts_ties(tmp_path):
    cal = calibration([4] * 5, draws=99, cache_dir=tmp_path)
    assert cal.p_value(1e6)[0] == pytest.approx(1 / 100)  # nothing exceeds: 1 / (B + 1)
    assert cal.p_value(0.0)[0] == 1.0  # every draw ties or exceeds
    # inclusive comparison: a statistic equal to a draw counts that draw
    row = cal.null[0]
    d = row[row > 0][0]
    expected = max((1 + np.sum(r >= d - 1e-9)) / 100 for r in cal.null)
    assert cal.p_value(d)[0] == pytest.approx(expected)


def test_reference_family_is_monotone_and_includes_flat():
    refs = reference_profiles(6)
    assert np.all(np.diff(refs, axis=1) >= 0)
    assert np.any(np.all(refs == 0.5, axis=1))
    # by count: 15 flat levels, 21 linear rises (pairs of 7 levels), 10 steps (pairs of 5) at each of 5 cuts
    assert len(refs) == 15 + 21 + 10 * 5
    pos = np.linspace(0.0, 1.0, 6)
    assert any(np.allclose(r, 0.1 + 0.8 * pos) for r in refs)  # a linear rise from 0.1 to 0.9
    assert any(np.array_equal(r, [0.2, 0.2, 0.2, 0.8, 0.8, 0.8]) for r in refs)  # a step at the middle


def test_calibration_is_computed_once_and_reused(tmp_path, monkeypatch):
    order_test.clear_memory_cache()
    first = calibration([3, 3, 5, 5], draws=199, cache_dir=tmp_path)
    assert calibration([3, 3, 5, 5], draws=199, cache_dir=tmp_path) is first  # memory
    files = list((tmp_path / "order-calibration").glob("*.npz"))
    assert len(files) == 1
    order_test.clear_memory_cache()

    def boom(*a, **k):
        raise AssertionError("recomputed a cached calibration")

    monkeypatch.setattr(order_test, "_simulate", boom)
    again = calibration([3, 3, 5, 5], draws=199, cache_dir=tmp_path)  # disk
    np.testing.assert_array_equal(again.null, first.null)
    with pytest.raises(AssertionError):
        calibration([3, 3, 5, 6], draws=199, cache_dir=tmp_path)  # another budget is another table


def test_default_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHFILL_CACHE_DIR", str(tmp_path / "c"))
    order_test.clear_memory_cache()
    calibration([2, 2, 2], draws=49)
    assert list((tmp_path / "c" / "order-calibration").glob("*.npz"))


def test_with_no_home_at_all_the_calibration_is_kept_in_memory(monkeypatch):
    # a uid with no passwd entry and HOME unset (cron, a container's random uid): Path.home() raised and the
    # run stopped mid-search
    def no_home():
        raise RuntimeError("Could not determine home directory.")

    for name in ("BENCHFILL_CACHE_DIR", "BENCHFILL_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(order_test.Path, "home", staticmethod(no_home))
    order_test.clear_memory_cache()
    assert order_test.default_cache_dir() is None
    assert calibration([2, 2, 3], draws=49).draws == 49


def test_one_new_item_from_probes_with_different_budgets(tmp_path):
    # Six probes, weakest first; the third was not run (0 trials) and is dropped.
    score = order_consistency([0, 1, 0, 3, 6, 8], [4, 4, 0, 8, 8, 8], cache_dir=tmp_path)
    assert score.statistic == 0.0 and score.p_value == 1.0 and not score.flagged
    assert len(score.fitted) == 5
    slip = order_consistency([4, 4, 0, 7, 1, 0], [4, 4, 0, 8, 8, 8], cache_dir=tmp_path)
    assert slip.flagged and slip.p_value <= 0.01
    with pytest.raises(ValueError):
        order_consistency([5, 1], [4, 4], cache_dir=tmp_path)


def test_single_response_per_model_holds_the_level_too(tmp_path):
    # T = 1 on a 29-model axis (the mmlu-pro shape): D is discrete, ties are counted, and the
    # share of 3000 monotone items flagged stays within .05 + 3 standard errors (observed 0.4%).
    rng = np.random.default_rng(13)
    pos = np.linspace(0, 1, 29)
    b, a = rng.uniform(-0.3, 1.3, size=(3000, 1)), rng.uniform(0.0, 12.0, size=(3000, 1))
    k = rng.binomial(1, 1 / (1 + np.exp(-a * (pos - b))))
    o = calibration([1] * 29, cache_dir=tmp_path).p_value(lr_statistic(k, np.ones(29)))
    assert np.mean(o <= 0.05) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 3000)


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "wrong_shape"])
def test_a_damaged_cache_file_is_recomputed_and_replaced(tmp_path, damage):
    order_test.clear_memory_cache()
    good = calibration([2, 3, 4], draws=49, cache_dir=tmp_path)
    (path,) = (tmp_path / "order-calibration").glob("*.npz")
    data = path.read_bytes()
    if damage == "empty":  # np.load: EOFError
        path.write_bytes(b"")
    elif damage == "truncated":  # zipfile.BadZipFile
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"PK\x03\x04 not a zip at all")
    else:  # readable, but its null does not fit its draws
        np.savez(path, trials=np.array([2, 3, 4]), draws=49, seed=0, version=order_test.CALIBRATION_VERSION,
                 references=good.references, null=good.null[:, :10])
    order_test.clear_memory_cache()
    again = calibration([2, 3, 4], draws=49, cache_dir=tmp_path)
    np.testing.assert_array_equal(again.null, good.null)
    order_test.clear_memory_cache()
    assert order_test._load(path, ((2, 3, 4), 49, 0)) is not None  # the bad file was overwritten
    assert [p.name for p in (tmp_path / "order-calibration").iterdir()] == [path.name]


def test_a_failed_cache_write_leaves_no_temp_file(tmp_path, monkeypatch):
    order_test.clear_memory_cache()

    def disk_full(fh, **arrays):
        fh.write(b"PK\x03\x04partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(order_test.np, "savez", disk_full)
    cal = calibration([2, 2, 5], draws=49, cache_dir=tmp_path)  # still computed, just not kept
    assert cal.null.shape[1] == 49
    assert list((tmp_path / "order-calibration").iterdir()) == []


def test_the_null_in_batches_is_the_null_in_one(monkeypatch):
    # Simulated in bounded batches of references (9,999 draws on livecodebench-codegen held 3.9 GiB in one):
    # the same draws, so the same o, whatever the batch size.
    t = (4, 8, 3, 4, 5, 8, 2, 6, 4, 4, 8, 3)
    monkeypatch.setattr(order_test, "BATCH_CELLS", 10**9)  # every reference in one batch, as before
    whole = order_test._simulate(t, 199, 3).null
    for cells in (199 * len(t), 5 * 199 * len(t) + 1, 1):  # one reference a batch, five, and the floor of one
        monkeypatch.setattr(order_test, "BATCH_CELLS", cells)
        # the same up to rounding: without numba, small and large batches take two isotonic fits (numpy's
        # and scipy's) that may differ in the last bit
        np.testing.assert_allclose(order_test._simulate(t, 199, 3).null, whole, rtol=1e-12, atol=0)


def test_models_own_offsets_on_an_item_are_allowed_for_in_the_null(tmp_path):
    """Monotone items whose models each carry their own offset on the logit, N(0, 2^2), as real models agree
    with themselves beyond any curve: the binomial null flags far more than alpha of them, the null that
    allows for sd 2 holds the level (within 3 Monte Carlo standard errors of 3000 items), and still flags the
    plainest wrong key, the strongest half of the axis failing what the weakest half all solve."""
    from scipy.special import expit, logit

    rng = np.random.default_rng(13)
    theta = np.clip(_monotone_items(rng, 3000), 0.02, 0.98)
    k = rng.binomial(T, expit(logit(theta) + 2.0 * rng.standard_normal(theta.shape)))
    d = lr_statistic(k, np.full(N, T))
    level = 0.05 + 3 * np.sqrt(0.05 * 0.95 / 3000)
    binomial = float(np.mean(calibration([T] * N, cache_dir=tmp_path).p_value(d) <= 0.05))
    allowed = calibration([T] * N, cache_dir=tmp_path, pair=2.0)
    assert binomial > 3 * level, binomial
    assert float(np.mean(allowed.p_value(d) <= 0.05)) <= level
    wrong = np.array([[T] * (N // 2) + [0] * (N // 2)])
    assert allowed.p_value(lr_statistic(wrong, np.full(N, T)))[0] <= 0.05
    # its own key and draws, cached apart from the binomial null's; at 0 the key and draws are those it always had
    assert allowed.pair == 2.0 and calibration([T] * N, cache_dir=tmp_path).pair == 0.0
    order_test.clear_memory_cache()
    again = calibration([T] * N, cache_dir=tmp_path, pair=2.0)  # from disk
    assert again.pair == 2.0 and np.array_equal(again.null, allowed.null)
    assert order_consistency([T] * (N // 2) + [0] * (N // 2), [T] * N, cache_dir=tmp_path, pair=2.0).flagged
    with pytest.raises(ValueError, match="pair must be a finite sd"):
        calibration([T] * N, cache_dir=tmp_path, pair=float("nan"))
