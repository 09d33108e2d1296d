"""``benchfill profile`` end to end on small files: table, JSON, plots, subsets, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchfill.cli import main


def _write_responses(path, n_models=8, n_items=40, trials=6, seed=0):
    rng = np.random.default_rng(seed)
    ability = np.linspace(-2, 2, n_models)
    b = rng.normal(0, 1.2, n_items)
    p = 1 / (1 + np.exp(-(ability[:, None] - b[None, :]) * 2))
    p[:, 0] = np.where(np.arange(n_models) >= n_models - 3, 0.0, 0.9)  # item q0: strong models fail
    k = rng.binomial(trials, p)
    lines = ["model,item_id,correct,trials"]
    for j in range(n_models):
        for i in range(n_items):
            lines.append(f"m{j},q{i},{k[j, i]},{trials}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_profile_table_and_outputs(tmp_path, capsys):
    resp = _write_responses(tmp_path / "responses.csv")
    out = tmp_path / "out"
    rc = main(["profile", "--responses", str(resp), "--out", str(out), "--draws", "199", "--subset", "10",
               "--repeats", "3"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "order-anomaly rate" in text and "q0" in text.split("flagged items")[1].splitlines()[2]
    assert "profile-guided NDR" in text
    data = json.loads((out / "profile.json").read_text())
    assert data["flagged"][0]["item_id"] == "q0"
    assert data["axis"]["models"][0] == "m0" and data["axis"]["basis"] == "performance"
    assert (out / "trajectories.png").stat().st_size > 1000 and (out / "histograms.png").stat().st_size > 1000


def test_profile_json_on_real_data(shared_data, capsys):
    # aime25: 16 models x 15 problems x 4 runs, every item profiled
    rc = main(["profile", "--responses", str(shared_data / "aime25" / "responses.csv"), "--json", "--draws", "199"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["n_items"] == 15 and data["summary"]["n_models"] == 16
    assert 0.0 <= data["summary"]["order_anomaly_rate"] <= 1.0


def test_answers_file_adds_entropy(tmp_path, capsys):
    resp = tmp_path / "r.csv"
    resp.write_text("model,item_id,correct,trials\na,x,0,2\nb,x,1,2\nc,x,2,2\n")
    ans = tmp_path / "answers.jsonl"
    ans.write_text("\n".join(json.dumps(r) for r in [
        {"model": "a", "item_id": "x", "answer": "B", "count": 2},
        {"model": "b", "item_id": "x", "answer": "A"}, {"model": "b", "item_id": "x", "answer": "B"},
        {"model": "c", "item_id": "x", "answer": "A", "count": 2}]) + "\n")
    assert main(["profile", "--responses", str(resp), "--answers", str(ans), "--json", "--draws", "99"]) == 0
    item = json.loads(capsys.readouterr().out)["items"][0]
    assert item["entropy"] == [0.0, 1.0, 0.0]
    assert item["concentration"] == 1.0


@pytest.mark.parametrize("args, message", [
    (["--alpha", "2"], "--alpha"),
    (["--responses", "MISSING.csv"], "MISSING.csv"),
    (["--draws", "100000000"], "--draws must be a whole number in 19..9999, got 100000000"),
])
def test_bad_input_is_one_line_and_nonzero(tmp_path, capsys, args, message):
    resp = _write_responses(tmp_path / "responses.csv", n_items=5)
    argv = ["profile", "--responses", str(resp), *args] if args[0] != "--responses" else ["profile", *args]
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and message in err[-1] and err[-1].startswith("benchfill: error:")


def test_bad_answers_file_names_the_line(tmp_path, capsys):
    resp = _write_responses(tmp_path / "responses.csv", n_items=5)
    ans = tmp_path / "a.csv"
    ans.write_text("model,item_id,answer,count\nm0,q0,A,x\n")
    rc = main(["profile", "--responses", str(resp), "--answers", str(ans)])
    assert rc != 0 and f"{ans}:2" in capsys.readouterr().err


def _small(tmp_path):
    resp = tmp_path / "r.csv"
    resp.write_text("model,item_id,correct,trials\nm1,a,0,4\nm2,a,2,4\nm3,a,4,4\nm1,b,4,4\nm2,b,1,4\n")
    return resp


def _run_answers(tmp_path, capsys, name, text):
    ans = tmp_path / name
    ans.write_text(text)
    out = tmp_path / "out"
    rc = main(["profile", "--responses", str(_small(tmp_path)), "--answers", str(ans), "--no-cache",
               "--draws", "19", "--json", "--out", str(out)])
    cap = capsys.readouterr()
    return rc, cap, ans, out


def test_answers_that_match_no_pair_of_the_responses_are_refused(tmp_path, capsys):
    rc, cap, ans, out = _run_answers(tmp_path, capsys, "a.csv", "model,item_id,answer,count\nX1,a,A,4\nX2,a,B,4\n")
    err = cap.err.strip().splitlines()
    assert rc != 0 and not out.exists() and cap.out == ""
    assert err[-1] == (f"benchfill: error: {ans}: none of its 2 (model, item) pairs is in {tmp_path / 'r.csv'} "
                       "(answers name model 'X1', item 'a'; responses name model 'm1', item 'a')")


def test_answers_that_match_some_pairs_warn_in_one_line(tmp_path, capsys):
    rc, cap, ans, _ = _run_answers(tmp_path, capsys, "a.csv",
                                   "model,item_id,answer,count\nm1,a,A,4\nm2,a,B,4\nX,a,B,4\n")
    assert rc == 0
    warning = [ln for ln in cap.err.splitlines() if ln.startswith("benchfill: warning:")]
    assert warning == [f"benchfill: warning: {ans}: 2 of 3 (model, item) pairs match {tmp_path / 'r.csv'}; "
                       "the other 1 are ignored (e.g. model 'X', item 'a')"]
    assert json.loads(cap.out)["items"][0]["entropy"][:2] == [0.0, 0.0]


def test_more_answers_than_trials_are_refused_naming_the_line(tmp_path, capsys):
    # m2 tried item a 4 times: 3 + 2 answers are one too many, on line 3
    rc, cap, ans, out = _run_answers(tmp_path, capsys, "a.csv", "model,item_id,answer,count\nm2,a,A,3\nm2,a,B,2\n")
    assert rc != 0 and not out.exists()
    assert cap.err.strip().splitlines()[-1] == (f"benchfill: error: {ans}:3: 5 answers for model 'm2', item 'a', "
                                                f"which has 4 trials in {tmp_path / 'r.csv'}")
    # a model that never tried the item (m3, b: no row) has room for no answer
    rc, cap, ans, _ = _run_answers(tmp_path, capsys, "b.csv", "model,item_id,answer\nm1,a,A\nm3,b,A\n")
    assert rc != 0 and f"{ans}:3: 1 answers for model 'm3', item 'b', which has 0 trials" in cap.err


@pytest.mark.parametrize("count", ["2.7", "true", '"x"', "-1"])
def test_an_answer_count_that_is_not_a_whole_number_is_refused(tmp_path, capsys, count):
    rc, cap, ans, out = _run_answers(tmp_path, capsys, "a.jsonl",
                                     '{"model": "m1", "item_id": "a", "answer": "A"}\n'
                                     f'{{"model": "m2", "item_id": "a", "answer": "A", "count": {count}}}\n')
    err = cap.err.strip().splitlines()
    assert rc != 0 and not out.exists() and len(err) == 1
    assert err[-1].startswith(f"benchfill: error: {ans}:2: field 'count' is ")


def test_a_fit_without_a_model_of_the_responses_names_both_files(tmp_path, capsys):
    from benchfill.irt.fit import IrtFit

    resp = _small(tmp_path)
    fit = tmp_path / "fit.json"
    IrtFit("1pl", "map", ("m1", "m2"), ("a", "b"), np.array([0.0, 1.0]), np.zeros(2), np.zeros(2), np.zeros(2),
           np.zeros(2)).save(fit)
    rc = main(["profile", "--responses", str(resp), "--fit", str(fit), "--no-cache", "--draws", "19"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and err[-1] == f"benchfill: error: {fit}: no ability for model 'm3' of {resp} (the fit has 2 models)"


@pytest.mark.parametrize("extra", [[], ["--subset", "1"]])
def test_responses_where_no_item_has_two_models_are_refused(tmp_path, capsys, extra):
    resp = tmp_path / "r.csv"
    resp.write_text("model,item_id,correct,trials\nm1,a,1,1\nm2,b,0,1\nm2,c,1,1\n")
    out = tmp_path / "out"
    rc = main(["profile", "--responses", str(resp), "--no-cache", "--draws", "19", "--out", str(out), *extra])
    cap = capsys.readouterr()
    assert rc != 0 and cap.out == "" and not out.exists()
    assert cap.err.strip().splitlines()[-1] == f"benchfill: error: {resp}: no item was tried by two or more models"


def test_an_empty_or_cut_cache_file_is_recomputed_not_a_traceback(tmp_path, capsys, monkeypatch):
    from benchfill.measure import order_test

    monkeypatch.setenv("BENCHFILL_CACHE_DIR", str(tmp_path / "cache"))
    resp = _write_responses(tmp_path / "responses.csv", n_items=6)
    argv = ["profile", "--responses", str(resp), "--draws", "19", "--json"]
    order_test.clear_memory_cache()
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    files = sorted((tmp_path / "cache" / "order-calibration").glob("*.npz"))
    assert files
    for k, f in enumerate(files):  # empty: EOFError; cut short: BadZipFile
        f.write_bytes(b"" if k % 2 == 0 else f.read_bytes()[:100])
    order_test.clear_memory_cache()
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == first
    assert sorted((tmp_path / "cache" / "order-calibration").iterdir()) == files  # rewritten, no temp files left
    order_test.clear_memory_cache()


def test_the_calibration_count_reaches_its_total_when_an_item_has_one_model(tmp_path, capsys):
    # q4 is tried by one model only: it is not profiled, and its trials vector had counted in the total
    resp = tmp_path / "two.csv"
    resp.write_text("model,item_id,correct,trials\nA,q1,0,1\nB,q1,1,1\nA,q2,1,1\nB,q2,0,1\nA,q3,1,1\nB,q3,1,1\n"
                    "A,q4,0,1\n")
    assert main(["profile", "--responses", str(resp), "--no-cache", "--draws", "19", "--json"]) == 0
    err = capsys.readouterr().err
    assert "order calibration 1/1: 2 models, trials 1, 3 items" in err and "1/2" not in err
