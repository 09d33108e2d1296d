"""The measurement CLI end to end: real data, the demo, saved fits, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from benchfill.cli import main
from benchfill.coverage import ddm, max_gap, top_k_gap_sum
from benchfill.irt.fit import IrtFit


def _json(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def test_diagnose_every_shared_responses_file(shared_data, capsys):
    files = sorted(shared_data.glob("*/responses.csv"))
    assert len(files) >= 12
    for f in files:
        argv = ["diagnose", "--responses", str(f), "--json"]
        if f.parent.name == "mmlu-pro":  # per-item guessing floors: its items have 2 to 10 options
            argv += ["--items", str(f.parent / "items.jsonl")]
        d = _json(capsys, argv)
        assert d["n_models"] >= 2 and d["n_items"] >= 15, f
        for key in ("ddm", "max_gap", "top_k_sum"):
            assert 0 <= d[key] <= 1, (f, key)
        assert d["k"] == 5 and len(d["gaps"]) == 5
        widths = [g["width"] for g in d["gaps"]]
        assert widths == sorted(widths, reverse=True) and widths[0] == pytest.approx(d["max_gap"])
        assert d["top_k_sum"] == pytest.approx(sum(widths))
        assert {"left", "right", "width", "left_item", "right_item"} <= set(d["gaps"][0])
        assert [g["rank"] for g in d["gaps"]] == [1, 2, 3, 4, 5]  # what the notes' gap lists name
        # the listed gaps a run's default confirmation (z se 0.02) cannot resolve: half-width below it
        narrow = d["notes"]["narrower_than_confirmation"]
        assert narrow["confirm_se"] == 0.02
        assert narrow["gaps"] == [i for i, w in enumerate(widths, start=1) if 0 < w and w / 2 < 0.02], f
        # the listed gaps beyond every model the matrix holds: their midpoint outside the span of the abilities' z
        lo, hi = d["notes"]["beyond_models"]["ability_z"]
        assert lo < hi
        assert d["notes"]["beyond_models"]["gaps"] == [
            i for i, g in enumerate(d["gaps"], start=1) if 0 < g["width"] and not lo <= (g["left"] + g["right"]) / 2 <= hi]
        if f.parent.name in ("mbpp", "cruxeval-output"):  # their five largest gaps all lie past every model
            assert d["notes"]["beyond_models"]["gaps"] == [1, 2, 3, 4, 5], f
        if f.parent.name == "humaneval":  # its fifth, [0.726, 0.763], lies below the strongest (z 0.77)
            assert d["notes"]["beyond_models"]["gaps"] == [1, 2, 3, 4]
        if f.parent.name == "mmlu-pro":
            assert d["notes"]["guessing"] is True and d["n_items"] == 12032
            assert len(narrow["gaps"]) >= 4  # 12,032 items: four of its five largest gaps are under 0.04 wide


def test_diagnose_table_on_demo_with_plot(tmp_path, capsys):
    png = tmp_path / "plots" / "ecdf.png"
    assert main(["diagnose", "--benchmark", "demo", "--plot", str(png), "--k", "3"]) == 0
    out = capsys.readouterr().out
    assert "DDM (W1 to uniform" in out and "max gap" in out and "top-3 gap sum" in out
    assert "exact: H_(m+1)/(m+1)" in out and "P(observed > uniform)" in out and "(exact)" in out
    assert "narrower than a run's confirmation" not in out  # the demo's top-3 gaps are 0.075-0.15 wide
    assert "beyond every model here" not in out  # ... and amid its 12 models' abilities
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(png.parent.glob(".ecdf-*"))  # no temp file left behind


def test_fit_then_diagnose_and_calibrate_from_saved_fit(tmp_path, capsys):
    fit_path = tmp_path / "fit.json"
    summary = _json(capsys, ["fit", "--benchmark", "demo", "--out", str(fit_path), "--bic", "--loo", "--json"])
    assert fit_path.is_file()
    assert set(summary["matrix_checks"]) >= {"model_information", "item_inversion_rate"}
    assert summary["bic"]["selected"] in ("1pl", "2pl")
    assert summary["leave_one_model_out"]["pearson_min"] > 0.9
    f = IrtFit.load(fit_path)
    d = _json(capsys, ["diagnose", "--fit", str(fit_path), "--json", "--target", "beta:2,2"])
    assert d["ddm"] == pytest.approx(ddm(f.z, "beta:2,2"))
    assert d["max_gap"] == pytest.approx(max_gap(f.z)) and d["target"] == "beta(2,2)"
    out = tmp_path / "kept.jsonl"
    c = _json(capsys, ["calibrate", "--benchmark", "demo", "--fit", str(fit_path), "--size", "20",
                       "--out", str(out), "--json"])
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert [k["id"] for k in kept] == c["selected"] and all("problem" in k for k in kept)
    assert c["ddm_after"] < c["ddm_before"]
    assert c["ranking"]["reference"] == "full benchmark"
    # more than there are: the flag named, as --k and --gaps are (the library said "size: k must lie ...")
    assert main(["calibrate", "--benchmark", "demo", "--fit", str(fit_path), "--size", "99"]) == 2
    assert capsys.readouterr().err.strip().endswith("--size 99: demo has 48 items, so at most 48")
    # the human-readable fit summary prints pass/fail per check
    assert main(["fit", "--benchmark", "demo", "--out", str(tmp_path / "f2.json")]) == 0
    text = capsys.readouterr().out
    assert "pass" in text and "fit written to" in text


def test_diagnose_reports_posterior_uncertainty_from_draws(tmp_path, capsys):
    rng = np.random.default_rng(0)
    b = np.array([-2.0, -1.8, -1.5, 1.5, 2.0])
    draws = b + rng.normal(0, 0.1, size=(300, 5))
    f = IrtFit(model="1pl", engine="nuts", models=("a", "b"), item_ids=tuple("vwxyz"), ability=np.zeros(2),
               ability_se=np.ones(2), difficulty=b, difficulty_se=np.full(5, 0.1), chance=np.zeros(5),
               difficulty_draws=draws, ability_draws=np.zeros((300, 2)), seed=3)
    f.save(tmp_path / "fit.json")
    d = _json(capsys, ["diagnose", "--fit", str(tmp_path / "fit.json"), "--json"])
    zd = f.z_draws
    # each draw normalized by its own min and max (Appendix C.6), worked out here, not read off the fit
    by_hand = (draws - draws.min(axis=1, keepdims=True)) / np.ptp(draws, axis=1, keepdims=True)
    assert np.allclose(zd, by_hand) and np.allclose(zd.min(axis=1), 0) and np.allclose(zd.max(axis=1), 1)
    assert d["posterior"]["max_gap"]["mean"] == pytest.approx(np.mean([max_gap(r) for r in zd]))
    assert d["posterior"]["ddm"]["mean"] == pytest.approx(np.mean([ddm(r) for r in zd]))
    assert d["top_k_sum"] == pytest.approx(top_k_gap_sum(f.z, 5))
    assert main(["diagnose", "--fit", str(tmp_path / "fit.json")]) == 0
    text = capsys.readouterr().out
    assert "90% [" in text
    # The ratio to the uniform baseline divides the posterior mean max gap, as its probability averages over
    # the draws; the line says so, since the max gap printed above it is that of the posterior-mean z.
    u = d["uniform"]
    assert u["ratio_of"] == "posterior mean max gap"
    assert u["observed_max_gap"] == pytest.approx(d["posterior"]["max_gap"]["mean"]) != pytest.approx(d["max_gap"])
    assert u["ratio"] == pytest.approx(u["observed_max_gap"] / u["expected_max_gap"])
    assert f"ratio {u['ratio']:.2f}x (posterior mean max gap {u['observed_max_gap']:.4f})" in text


def test_ratio_of_a_map_fit_divides_the_printed_max_gap(tmp_path, capsys):
    f = IrtFit(model="1pl", engine="map", models=("a", "b"), item_ids=tuple("vwxyz"), ability=np.zeros(2),
               ability_se=np.ones(2), difficulty=np.array([-2.0, -1.8, -1.5, 1.5, 2.0]), difficulty_se=np.ones(5),
               chance=np.zeros(5), seed=0)
    f.save(tmp_path / "fit.json")
    u = _json(capsys, ["diagnose", "--fit", str(tmp_path / "fit.json"), "--json"])["uniform"]
    assert u["ratio_of"] == "max gap" and u["observed_max_gap"] == pytest.approx(max_gap(f.z))
    assert u["ratio"] == pytest.approx(max_gap(f.z) / u["expected_max_gap"])


def test_zero_width_gaps_are_not_counted_as_narrower_than_confirmation(tmp_path, capsys):
    # z = 0, .5, .51, .51, 1: the two end gaps and the tie are 0 wide and cannot be filled; only the 0.01 gap
    # is too narrow for a run's confirmation (se 0.02) to resolve.
    f = IrtFit(model="1pl", engine="map", models=("a", "b"), item_ids=tuple("vwxyz"), ability=np.zeros(2),
               ability_se=np.ones(2), difficulty=np.array([-1.0, 0.0, 0.02, 0.02, 1.0]), difficulty_se=np.ones(5),
               chance=np.zeros(5), seed=0)
    f.save(tmp_path / "fit.json")
    d = _json(capsys, ["diagnose", "--fit", str(tmp_path / "fit.json"), "--k", "6", "--json"])
    assert [round(g["width"], 6) for g in d["gaps"]] == [0.5, 0.49, 0.01, 0, 0, 0]
    assert d["notes"]["narrower_than_confirmation"]["gaps"] == [3]
    assert main(["diagnose", "--fit", str(tmp_path / "fit.json"), "--k", "6"]) == 0
    assert "  1 of these is narrower than a run's confirmation" in capsys.readouterr().out


def test_items_with_trials_0_only_stay_off_the_axis_with_one_warning(tmp_path, capsys):
    # i3 has rows, all with trials 0: it was fitted at the prior's mode (z 0.911) and entered every figure.
    rows = [(m, i, c) for m, cs in (("m0", "011"), ("m1", "111"), ("m2", "001"), ("m3", "101"))
            for i, c in zip(("i0", "i1", "i2"), cs, strict=True)]
    r = tmp_path / "r.csv"
    r.write_text("model,item_id,correct,trials\n" + "".join(f"{m},{i},{c},1\n" for m, i, c in rows)
                 + "".join(f"m{j},i3,0,0\n" for j in range(4)))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "Mean of empty slice" from the empty column, no more
        for cmd in (["diagnose"], ["calibrate", "--size", "2"], ["fit", "--out", str(tmp_path / "f.json")]):
            assert main([*cmd, "--responses", str(r), "--json"]) == 0
            out, err = capsys.readouterr()
            d, err = json.loads(out), err.strip().splitlines()
            assert err == [f"benchfill: warning: {r}: 1 item(s) with trials 0 only have no difficulty and are "
                           "left out: i3"], (cmd, err)
            assert d["n_items"] == 3 and "i3" not in d.get("selected", ())
            if cmd[0] != "calibrate":
                assert d.get("extreme_items", d.get("notes", {}).get("extreme_items"))["no_responses"] == ["i3"]
    assert IrtFit.load(tmp_path / "f.json").item_ids == ("i0", "i1", "i2")
    r.write_text("model,item_id,correct,trials\nm0,i0,0,0\nm1,i0,0,0\n")  # nothing tried at all: an error
    assert main(["diagnose", "--responses", str(r)]) != 0
    assert "every row has trials 0" in capsys.readouterr().err


def test_fit_loo_leaves_undefined_refits_out_and_says_so(tmp_path, capsys):
    # Without m0 the two items are answered alike: that refit's difficulties are equal, its correlation
    # undefined. The summary was "pearson mean nan (min nan)" with scipy's ConstantInputWarning twice.
    r = tmp_path / "two.csv"
    r.write_text("model,item_id,correct,trials\nm0,i0,0,1\nm0,i1,1,1\nm1,i0,1,1\nm1,i1,1,1\n"
                 "m2,i0,0,1\nm2,i1,0,1\n")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["fit", "--responses", str(r), "--out", str(tmp_path / "f.json"), "--loo"]) == 0
        out = capsys.readouterr().out
        d = _json(capsys, ["fit", "--responses", str(r), "--out", str(tmp_path / "f.json"), "--loo", "--json"])
    line = next(x for x in out.splitlines() if x.startswith("leave-one-model-out"))
    assert "nan" not in line and "pearson mean 1.000 (min 1.000)" in line
    assert "1 of 3 refits left out, without a correlation" in line
    lo = d["leave_one_model_out"]
    assert (lo["undefined"], lo["refits"], lo["pearson_mean"]) == (1, 3, pytest.approx(1.0))
    assert lo["per_model"]["m0"]["pearson"] is None  # NaN in JSON is null


def _bad(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    ("name", "text", "items", "match"),
    [
        ("r.csv", "model,item_id,correct,trials\nA,q,1,2\nA,q 3\n", None, r"r\.csv:3: malformed line"),
        ("r.csv", "model,item_id,correct,trials\nA,q,3,2\nB,q,0,1\n", None, r"r\.csv:2: correct \(3\) > trials"),
        ("r.csv", "model,item_id,correct,trials\nA,q,-1,2\nB,q,0,1\n", None, r"r\.csv:2: field 'correct' is negative"),
        ("r.csv", "model,item_id,correct,trials\nA,q,1,2.5\nB,q,0,1\n", None, r"r\.csv:2: field 'trials' must be"),
        ("r.csv", "", None, r"r\.csv: no responses \(empty file\)"),
        ("r.csv", "model,item_id,correct,trials\nA,q,1,1\nA,p,0,1\n", None, r"r\.csv: responses from 1 model"),
        ("r.jsonl", '{"model": "A"\n', None, r"r\.jsonl:1: malformed JSON"),
        ("r.csv", "model,item_id,correct,trials\nA,q,1,1\nB,x,0,1\n", '{"id": "q"}\n',
         r"r\.csv:3: item 'x' is not in the items file"),
        ("r.csv", "model,item_id,correct,trials\nA,q,1,1\nB,q,0,1\n", '{"id": "q"}\n{"id": "q"}\n',
         r"items\.jsonl:2: duplicate item id 'q'"),
    ],
)
def test_bad_inputs_give_one_line_error_and_nonzero_exit(tmp_path, capsys, name, text, items, match):
    argv = ["diagnose", "--responses", _bad(tmp_path, name, text)]
    if items is not None:
        argv += ["--items", _bad(tmp_path, "items.jsonl", items)]
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc != 0 and out == ""
    assert err.startswith("benchfill: error: ") and err.count("\n") == 1
    import re

    assert re.search(match, err), err


def test_usage_errors(tmp_path, capsys):
    cases = [
        (["diagnose"], "no input"),
        (["diagnose", "--benchmark", "demo", "--target", "beta:0,1"], "Beta parameters"),
        (["diagnose", "--benchmark", "demo", "--k", "0"], "--k"),
        (["calibrate", "--benchmark", "demo", "--size", "999"], "size"),
        (["diagnose", "--benchmark", "demo", "--guessing-options", "1"], "--guessing-options"),
        (["diagnose", "--benchmark", "no-such-benchmark"], "no-such-benchmark"),
        (["diagnose", "--fit", str(tmp_path / "missing.json")], "missing.json"),
    ]
    for argv, needle in cases:
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc != 0 and needle in err and err.count("\n") == 1, (argv, err)


def test_registered_benchmark_through_the_registry(shared_data, capsys):
    d = _json(capsys, ["diagnose", "--benchmark", "aime25", "--data-dir", str(shared_data), "--json"])
    direct = _json(capsys, ["diagnose", "--responses", str(shared_data / "aime25/responses.csv"), "--json"])
    assert (d["n_models"], d["n_items"]) == (16, 15)
    assert d["ddm"] == pytest.approx(direct["ddm"]) and d["max_gap"] == pytest.approx(direct["max_gap"])


def test_library_face_is_re_exported():
    import benchfill

    assert benchfill.diagnose([0.5]).max_gap == pytest.approx(0.5)
    assert benchfill.demo_benchmark().matrix.n_models == 12
    import benchfill.pruning  # noqa: F401  (importing the module must not shadow the function)

    assert benchfill.calibrate([0.1, 0.5, 0.9], 1).selected == ["1"]
    assert callable(benchfill.read_items) and callable(benchfill.read_responses)


def test_help_is_fast_and_imports_nothing_heavy():
    code = (
        "import sys, benchfill.cli as c\n"
        "try:\n    c.main(['diagnose', '--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('scipy', 'matplotlib', 'litellm', 'openai', 'benchfill.irt.map') if m in sys.modules]\n"
        "print(heavy, file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "--responses" in r.stdout
    assert r.stderr.strip() == "[]", r.stderr


@pytest.mark.slow
def test_diagnose_with_nuts_reports_posterior_of_the_demo(capsys):
    d = _json(capsys, ["diagnose", "--benchmark", "demo", "--engine", "nuts", "--chains", "2",
                       "--warmup", "200", "--draws", "200", "--json"])
    post = d["posterior"]
    assert post["ddm"]["n_draws"] == 400
    for key in ("ddm", "max_gap"):
        assert post[key]["q05"] <= post[key]["mean"] <= post[key]["q95"] and post[key]["sd"] > 0
    assert "averaged over posterior draws" in d["uniform"]["p_method"]
    assert d["notes"]["fit"]["engine"] == "nuts"


def test_fit_says_each_refit_it_makes_before_it_makes_it(tmp_path, capsys):
    # `fit --bic --loo --spread` on mmlu-pro printed nothing for 26-48 s
    assert main(["fit", "--benchmark", "demo", "--out", str(tmp_path / "f.json"), "--bic", "--loo", "--spread"]) == 0
    err = capsys.readouterr().err
    assert [x for x in err.splitlines() if x.endswith(" ...")] == [
        "fitting the 2PL beside the 1PL (--bic) ...", "estimating how item discrimination spreads (--spread) ...",
        "refitting without each of the 12 models in turn (--loo) ..."]  # fmt: skip


def test_fit_json_keeps_its_progress_on_stderr_and_no_command_is_a_usage_error_there(tmp_path, shared_data, capsys):
    # --json had silenced the progress of --bic / --spread / --loo: minutes of nothing on a large matrix
    assert main(["fit", "--responses", str(shared_data / "aime25" / "responses.csv"), "--out",
                 str(tmp_path / "f.json"), "--bic", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["bic"] and "fitting the 2PL beside the 1PL (--bic) ..." in err
    # no command: the usage on stderr (it went to stdout, with exit status 2)
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: benchfill")


def test_diagnose_says_when_items_tie_on_few_difficulties(tmp_path, capsys):
    from benchfill.irt.simulate import simulate_responses

    sim = simulate_responses(12, 100, 1, difficulty_sd=1.15, difficulty_shape="uniform", seed=3)
    m = sim.matrix
    rows = [f"{mo},{it},{m.correct[j, i]},{m.trials[j, i]}" for j, mo in enumerate(m.models) for i, it in enumerate(m.item_ids)]
    (tmp_path / "r.csv").write_text("model,item_id,correct,trials\n" + "\n".join(rows) + "\n")
    assert main(["diagnose", "--responses", str(tmp_path / "r.csv")]) == 0
    out = capsys.readouterr().out
    levels = len(set(np.round(__import__("benchfill").fit(m).z, 9)))
    assert f"the fit places these 100 items on only {levels} distinct difficulties" in out
    assert f"largest gaps (of 101; {100 - levels} of them are ties of width 0" in out
