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
