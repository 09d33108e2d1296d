"""`benchfill predict train | evaluate | score | residuals` on the real humaneval and aime25 data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchfill.cli import main
from benchfill.predict import FieldFallbackWarning, Predictor, benchmark_targets, labelled_items, train


def test_target_is_standardized_irt_difficulty_that_tracks_failure_rate(shared_data):
    lab = benchmark_targets("humaneval", shared_data)
    assert len(lab) == 164 and lab.z.mean() == pytest.approx(0, abs=1e-9) and lab.z.std() == pytest.approx(1)
    m = lab.matrices["humaneval"]
    fail = 1 - m.correct.sum(0) / m.trials.sum(0)
    assert np.corrcoef(fail, lab.z)[0, 1] > 0.95
    aime = benchmark_targets("aime25", shared_data)
    assert len(aime) == 15 and all(i.startswith("2025-I-") for i in aime.ids)  # the matrix covers AIME I only


def test_train_save_score_with_a_stated_uncertainty(shared_data, tmp_path, capsys):
    out = tmp_path / "he.json"
    rc = main(["predict", "train", "--benchmark", "humaneval", "--data-dir", str(shared_data),
               "--families", "length,structural,embedding", "--embedder", "hashing", "--out", str(out)])
    assert rc == 0
    assert "10-fold rho" in capsys.readouterr().out
    pred = Predictor.load(out)
    assert 0.5 < pred.residual_sd < 1.2  # z units: a real but partial signal
    items = tmp_path / "new.jsonl"
    new = [{"id": "n1", "prompt": "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n"},
           {"id": "n2", "prompt": "def solve(grid: list[list[int]]) -> int:\n    \"\"\"" + "Count the regions. " * 40}]
    items.write_text("\n".join(json.dumps(x) for x in new) + "\n")
    scored = tmp_path / "new-folder" / "scored.jsonl"  # a folder that does not exist yet is made
    assert main(["predict", "score", "--predictor", str(out), "--items", str(items), "--out", str(scored)]) == 0
    rows = [json.loads(ln) for ln in scored.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["n1", "n2"] and [p.name for p in scored.parent.iterdir()] == ["scored.jsonl"]
    assert rows[0]["z"] < rows[1]["z"]  # the short one-liner is predicted easier than the long puzzle
    assert rows[0]["sd"] == pytest.approx(pred.residual_sd)
    sc = pred.scales["humaneval"]
    assert rows[0]["difficulty"] == pytest.approx(sc["mean"] + sc["sd"] * rows[0]["z"])
    assert rows[0]["axis_sd"] == pytest.approx(sc["sd"] * pred.residual_sd / (sc["b_max"] - sc["b_min"]))
    # the library call the pre-screen will use gives the same answer for one item dict
    one = pred.predict_item(new[0])
    assert one.z == pytest.approx(rows[0]["z"]) and one.benchmark == "humaneval"
    # residuals of another benchmark against the saved predictor (no K-fold inside a 15-item set)
    assert main(["predict", "residuals", "--benchmark", "aime25", "--data-dir", str(shared_data),
                 "--predictor", str(out), "--threshold", "0", "--json"]) == 0
    flags = json.loads(capsys.readouterr().out)
    assert len(flags) == 15 and all(f["residual"] == pytest.approx(f["z"] - f["z_hat"]) for f in flags)


def test_evaluate_each_family_and_the_auc_table(shared_data, capsys):
    rc = main(["predict", "evaluate", "--benchmark", "humaneval", "--data-dir", str(shared_data), "--each",
               "--families", "length,structural", "--folds", "5", "--json"])
    assert rc == 0
    got = capsys.readouterr()
    res = json.loads(got.out)
    # each fold said on stderr as it ends (half a minute in all on mmlu-pro), per family set
    assert got.err.count("  kfold 5/5 fold4: rho ") == 4 and "families length+structural:" in got.err
    fams = [r["families"] for r in res["results"]]
    assert fams == [["random"], ["length"], ["structural"], ["length", "structural"]]
    by = {"+".join(r["families"]): r for r in res["results"]}
    assert by["length+structural"]["rho_mean"] > by["random"]["rho_mean"] + 0.2
    assert all(len(r["per_fold"]) == 5 for r in res["results"])
    auc = {a["predictor"].split(" ")[0]: a for a in res["response_auc"]}
    assert auc["oracle"]["auc"] > auc["predicted"]["auc"] > auc["constant"]["auc"] > 0.6
    assert auc["constant"]["pacc"] == 0.0


def test_residual_flags_on_aime25_list_items_with_their_text(shared_data, capsys):
    rc = main(["predict", "residuals", "--benchmark", "aime25", "--data-dir", str(shared_data),
               "--families", "length,structural", "--threshold", "1.0", "--json"])
    assert rc == 0
    got = capsys.readouterr()
    flags = json.loads(got.out)
    assert "  kfold 10/10 fold9\n" in got.err  # progress, without a fold's rho of one to three items
    assert flags and [f["rank"] for f in flags] == list(range(1, len(flags) + 1))
    scores = [abs(f["score"]) for f in flags]
    assert scores == sorted(scores, reverse=True) and min(scores) >= 1.0
    for f in flags:
        assert f["item_id"].startswith("2025-I-") and f["excerpt"]
        assert f["residual"] == pytest.approx(f["z"] - f["z_hat"])
        assert ("harder" in f["reading"]) == (f["residual"] > 0)


def test_bad_input_gives_one_line_errors(shared_data, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["predict", "score", "--predictor", str(bad), "--items", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a predictor file" in err and str(bad) in err
    assert main(["predict", "evaluate", "--benchmark", "humaneval", "--data-dir", str(shared_data),
                 "--split", "category", "--families", "length"]) == 2
    assert "needs a category" in capsys.readouterr().err
    assert main(["predict", "evaluate", "--benchmark", "aime24", "--data-dir", str(shared_data)]) == 2
    assert "no responses.csv" in capsys.readouterr().err


def test_residuals_refuse_feature_options_a_saved_predictor_settles(shared_data, tmp_path, capsys):
    out = tmp_path / "he.json"
    assert main(["predict", "train", "--benchmark", "humaneval", "--data-dir", str(shared_data),
                 "--families", "length,structural", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["predict", "residuals", "--benchmark", "aime25", "--data-dir", str(shared_data),
                 "--predictor", str(out), "--families", "length"]) == 2
    err = capsys.readouterr().err
    assert "--families: --predictor" in err and "brings its own families, embedder and scorers" in err


def test_residuals_refuse_a_predictor_trained_on_the_same_benchmark(shared_data, tmp_path, capsys):
    # its predictions there are in sample: the residuals shrink and the rho flatters, yet the table called them held out
    out = tmp_path / "aime.json"
    assert main(["predict", "train", "--benchmark", "aime25", "--data-dir", str(shared_data),
                 "--families", "length,structural", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["predict", "residuals", "--benchmark", "aime25", "--data-dir", str(shared_data),
                 "--predictor", str(out), "--json"]) == 2
    got = capsys.readouterr()
    assert got.out == "" and got.err.strip().splitlines() == [
        f"benchfill: error: --predictor {out} was trained on aime25: its residuals there are in sample, not held "
        "out; leave out --predictor for out-of-fold residuals"]


def test_score_warns_or_refuses_when_the_items_lack_the_predictors_text_field(tmp_path, capsys):
    # a predictor trained on items whose text is in "prompt" (as humaneval's is)
    train_items = [{"id": f"t{k}", "prompt": " and ".join(["the sum of two primes"] * (k % 9 + 1)) + "?"}
                   for k in range(60)]
    lab = labelled_items("toy", train_items, [float(k % 9) for k in range(60)], text_field="prompt")
    pred, _ = train(lab, ["length", "structural"], folds=3, text_field="prompt")
    saved = pred.save(tmp_path / "toy.json")
    items = tmp_path / "items.jsonl"

    def score(rows):
        items.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        rc = main(["predict", "score", "--predictor", str(saved), "--items", str(items)])
        out, err = capsys.readouterr()
        return rc, out, err

    text = "the sum of two primes and the sum of two primes?"
    rc, out, err = score([{"id": "a", "prompt": text, "answer": "12"}])
    assert rc == 0 and err == ""  # the predictor's own field: nothing to say
    expected = json.loads(out)["z"]
    # the one candidate field the items have, used instead: scored, with one warning line on stderr that
    # names the file, the field used and the predictor's, the way to choose
    rc, out, err = score([{"id": "a", "problem": text, "answer": "12"}])
    assert rc == 0 and json.loads(out)["z"] == pytest.approx(expected)
    assert err.count("\n") == 1 and err.startswith(f"benchfill: warning: {items}: ")
    assert "no text field 'prompt'" in err and "scoring the items' 'problem' instead" in err
    assert "rename it to 'prompt'" in err
    # the library says it through the warnings module, not on stderr
    with pytest.warns(FieldFallbackWarning, match="'problem' instead"):
        assert pred.predict_item({"problem": text}).z == pytest.approx(expected)
    # items that mix fields (one item's text would come from another field than the rest's): refused
    rc, out, err = score([{"id": "a", "prompt": text}, {"id": "b", "problem": text}])
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"benchfill: error: {items}:2: item b has no text field 'prompt'")
    # several candidates and none of them the predictor's: no guess
    rc, out, err = score([{"id": "a", "question": text, "input": "3 5"}])
    assert rc == 2 and out == "" and err.count("\n") == 1 and str(items) in err
    assert "several candidates ('question', 'input')" in err
    # a predictor trained on options in "options" reading "choices": scored, with a warning
    opts = [{**it, "options": ["1", "2", "3"]} for it in train_items]
    lab = labelled_items("toy", opts, [float(k % 9) for k in range(60)], text_field="prompt", options_field="options")
    saved = train(lab, ["length", "structural"], folds=3, text_field="prompt", options_field="options")[0].save(saved)
    rc, out, err = score([{"id": "a", "prompt": text, "choices": ["1", "2"]}])
    assert rc == 0 and err.count("\n") == 1 and "reading the items' 'choices' as their options instead" in err


def test_the_residuals_table_lists_fifty_and_says_how_many_more(shared_data, capsys):
    # on mmlu-pro 1,712 items were flagged: 3,426 lines of table by default
    base = ["predict", "residuals", "--benchmark", "humaneval", "--data-dir", str(shared_data), "--families",
            "length,structural", "--threshold", "0.2"]
    assert main(base) == 0
    out = capsys.readouterr().out.splitlines()
    flagged = int(out[0].split("; ")[1].split(" flagged")[0])
    assert flagged > 50 and out[-1] == (f"... and {flagged - 50} more, less far from their predictions (--top N "
                                        "lists N, --json all of them)")
    assert main([*base, "--json"]) == 0 and len(json.loads(capsys.readouterr().out)) == flagged
    assert main([*base, "--top", "60"]) == 0
    assert "more, less far" not in capsys.readouterr().out


def test_the_auc_table_says_a_constants_rho_is_undefined_rather_than_nan():
    from benchfill.cli.predict import auc_lines

    lines = auc_lines([{"benchmark": "he", "predictor": "constant", "auc": 0.7, "rho": float("nan"), "pacc": 0.0},
                       {"benchmark": "he", "predictor": "oracle", "auc": 0.9, "rho": 0.5, "pacc": 0.7}])
    assert "nan" not in "\n".join(lines) and "rho   n/a  pacc 0.000" in lines[1] and "rho 0.500" in lines[2]
    assert "Eq. 2 counts a tie as a miss" in lines[0]
