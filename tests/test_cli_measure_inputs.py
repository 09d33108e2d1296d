"""Inputs the measuring and predicting commands used to take without a word, or refuse with a message that
named the wrong thing: each is now one line naming the option, file or line at fault, and a non-zero exit."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from test_cli_files import MATRIX, _err

from benchfill.cli import main
from benchfill.irt.fit import IrtFit


def _one_line(rc: int, err: str, pattern: str) -> None:  # (test_cli_files': with the exit code of a refusal)
    assert rc == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(pattern, err), err


def _usage_error(capsys, argv, pattern: str) -> None:
    """argparse's refusal: exit 2 and an error line naming the option."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert re.search(pattern, err) and "Traceback" not in err, err


def _responses(tmp_path, text: str = MATRIX):
    p = tmp_path / "r.csv"
    p.write_text(text, encoding="utf-8")
    return str(p)


def _fit(**over) -> IrtFit:
    kw = dict(model="1pl", engine="map", models=("a", "b"), item_ids=("x", "y", "z"), ability=np.zeros(2),
              ability_se=np.ones(2), difficulty=np.array([-1.0, 0.0, 1.0]), difficulty_se=np.full(3, 0.2),
              chance=np.zeros(3))
    return IrtFit(**{**kw, **over})


# -- 1. a benchmark named twice -------------------------------------------------------------------


@pytest.mark.parametrize("action", [["evaluate"], ["residuals"], ["train", "--out", "p.json"]])
def test_a_benchmark_named_twice_is_refused(shared_data, tmp_path, monkeypatch, capsys, action):
    monkeypatch.chdir(tmp_path)
    argv = ["predict", action[0], "--benchmark", "aime25", "aime25", "--data-dir", str(shared_data), *action[1:]]
    _one_line(*_err(capsys, argv), r"--benchmark: aime25 given twice")
    assert not (tmp_path / "p.json").exists()


# -- 2. NUTS draws too few for split R-hat; a saved fit without NaN --------------------------------


def test_nuts_draws_too_few_for_split_rhat_are_refused(tmp_path, capsys):
    out = tmp_path / "n.json"
    _usage_error(capsys, ["fit", "--benchmark", "demo", "--engine", "nuts", "--draws", "2", "--warmup", "20",
                          "--out", str(out)], r"argument --draws: must be at least 4")
    _usage_error(capsys, ["diagnose", "--benchmark", "demo", "--engine", "nuts", "--draws", "1"],
                 r"argument --draws: must be at least 4")
    assert not out.exists()


def test_the_library_refuses_too_few_draws_and_the_cli_asks_the_same_minimum():
    from benchfill.cli.argtypes import mcmc_draws
    from benchfill.demo import demo_benchmark
    from benchfill.errors import ConfigError
    from benchfill.irt import fit
    from benchfill.irt.convergence import MIN_DRAWS

    with pytest.raises(ConfigError, match=r"draws: must be at least 4"):
        fit(demo_benchmark().matrix, engine="nuts", draws=3, warmup=10)
    assert mcmc_draws(str(MIN_DRAWS)) == MIN_DRAWS
    with pytest.raises(Exception, match="at least"):
        mcmc_draws(str(MIN_DRAWS - 1))


def test_a_saved_fit_is_strict_json_with_null_for_undefined_figures(tmp_path):
    path = tmp_path / "fit.json"
    _fit(engine="nuts", ability_se=np.array([np.nan, 1.0]), log_likelihood=float("nan"),
         diagnostics={"max_rhat": float("nan"), "min_ess_bulk": float("inf"), "divergences": 0}).save(path)

    def refuse(name):
        raise AssertionError(f"{name} in a saved fit")

    d = json.loads(path.read_text(), parse_constant=refuse)
    assert d["diagnostics"]["max_rhat"] is None and d["diagnostics"]["min_ess_bulk"] is None
    assert d["ability_se"] == [None, 1.0] and d["log_likelihood"] is None
    back = IrtFit.load(path)  # and it reads back, null as NaN where a number is kept
    assert np.isnan(back.ability_se[0]) and back.ability_se[1] == 1.0 and np.isnan(back.log_likelihood)


def test_the_rhat_summary_of_too_few_draws_is_nan_without_a_warning():
    import warnings

    from benchfill.irt.sampling import _extreme

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(_extreme(np.nanmax, np.full(3, np.nan)))
        assert _extreme(np.nanmax, np.array([1.0, np.nan, 1.2])) == 1.2


# -- 3. Beta targets whose quantiles do not exist in floating point -------------------------------


@pytest.mark.parametrize("target", ["beta:inf,2", "beta:2,inf", "beta:1e308,1e308", "beta:1e200,2"])
def test_beta_targets_that_overflow_are_refused(capsys, target):
    _one_line(*_err(capsys, ["diagnose", "--benchmark", "demo", "--target", target]), r"error: target .*beta")
    _one_line(*_err(capsys, ["calibrate", "--benchmark", "demo", "--size", "5", "--target", target]),
              r"error: target .*beta")


def test_beta_targets_with_finite_quantiles_stay_accepted():
    from benchfill.coverage import parse_target

    for spec in ("beta:2,2", "beta:1e307,1e307", "beta:1e-300,1", "beta:1e15,1"):
        assert np.isfinite(parse_target(spec).grid(48)).all(), spec


# -- 4. a reference ranking file read strictly ----------------------------------------------------


@pytest.mark.parametrize("name, text, pattern", [
    ("ref.csv", "model,score\nm0,0.1\nm1,0.2\nm2,0.3\nm3,0.4\nm0,0.5\n",
     r"ref\.csv:6: model 'm0' again \(first on line 2\)"),
    ("ref.csv", "m0,0.1,5\nm1,0.2\nm2,0.3\nm3,0.4\n", r"ref\.csv:1: expected 'model,score', found 3 column"),
    ("ref.csv", "model,score\nm0,0.1\nm1,0.2,7\nm2,0.3\nm3,0.4\n", r"ref\.csv:3: expected 'model,score'"),
    ("ref.json", '{"m0": 0.1,\n "m1": true,\n "m2": 0.3,\n "m3": 0.4}', r"ref\.json:2: model 'm1': score true"),
    ("ref.json", '{"m0": 0.1,\n "m1": 0.2,\n "m2": 0.3,\n "m3": 0.4,\n "m0": 0.9}',
     r"ref\.json:5: model 'm0' again \(first on line 1\)"),
])
def test_a_reference_file_is_refused_at_the_line_at_fault(tmp_path, capsys, name, text, pattern):
    ref = tmp_path / name
    ref.write_text(text, encoding="utf-8")
    out = tmp_path / "kept.jsonl"
    argv = ["calibrate", "--responses", _responses(tmp_path), "--size", "4", "--reference", str(ref), "--out", str(out)]
    _one_line(*_err(capsys, argv), pattern)
    assert not out.exists()


def test_a_well_formed_reference_file_is_still_read(tmp_path, capsys):
    ref = tmp_path / "ref.csv"
    ref.write_text("model,score\nm0,0.1\nm1\t0.2\nm2,0.3\nm3,0.4\n", encoding="utf-8")
    assert main(["calibrate", "--responses", _responses(tmp_path), "--size", "4", "--reference", str(ref),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranking"]["reference"] == str(ref)


# -- 5. a benchmark without responses: a hint that works -----------------------------------------


def test_a_benchmark_without_responses_points_to_a_command_that_works(shared_data, tmp_path, capsys):
    rc, err = _err(capsys, ["diagnose", "--benchmark", "aime24", "--data-dir", str(shared_data)])
    _one_line(rc, err, r"pass --responses FILE --items \S+aime24/items\.jsonl instead of --benchmark")
    items = re.search(r"--items (\S+)", err).group(1)
    ids = [json.loads(line)["id"] for line in open(items, encoding="utf-8") if line.strip()]
    rows = "".join(f"m{m},{i},{int((k * k + 3 * m * k + m) % 7 < m + 2)},1\n" for m in range(4) for k, i in enumerate(ids))
    responses = _responses(tmp_path, "model,item_id,correct,trials\n" + rows)
    assert main(["diagnose", "--responses", responses, "--items", items, "--json"]) == 0  # the hint, followed
    assert json.loads(capsys.readouterr().out)["n_items"] == len(ids)


# -- 6. messages that named the wrong thing ------------------------------------------------------


def test_predict_on_a_built_in_benchmark_says_what_is_missing(tmp_path, capsys):
    rc, err = _err(capsys, ["predict", "train", "--benchmark", "demo", "--out", str(tmp_path / "p.json")])
    _one_line(rc, err, r"benchmark demo: built in, without a responses\.csv")
    assert "None" not in err


def test_an_output_that_is_a_folder_is_named_as_the_option(tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    adir = str(tmp_path / "adir")
    _one_line(*_err(capsys, ["diagnose", "--benchmark", "demo", "--plot", adir]), r"--plot '.*adir': is a folder")
    _one_line(*_err(capsys, ["calibrate", "--benchmark", "demo", "--size", "4", "--out", adir]),
              r"--out '.*adir': is a folder")
    _one_line(*_err(capsys, ["predict", "score", "--predictor", str(tmp_path / "p.json"), "--items", adir,
                             "--out", adir]), r"--out '.*adir': is a folder")
    _one_line(*_err(capsys, ["fit", "--benchmark", "demo", "--out", adir]), r"--out '.*adir': is a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"] and not list((tmp_path / "adir").iterdir())


def test_an_output_under_a_file_says_the_file_is_not_a_folder(tmp_path, capsys):
    (tmp_path / "f.json").write_text("{}")
    under = str(tmp_path / "f.json" / "out.json")
    for argv in (["fit", "--benchmark", "demo", "--out", under],
                 ["calibrate", "--benchmark", "demo", "--size", "4", "--out", under],
                 ["diagnose", "--benchmark", "demo", "--plot", under],
                 ["predict", "train", "--benchmark", "aime25", "--out", under]):
        _one_line(*_err(capsys, argv), r"f\.json is a file, not a folder")


def test_a_single_option_item_is_named_with_its_file_and_line(tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "q0", "options": ["a", "b"]}\n{"id": "q1"}\n\n{"id": "q2", "options": ["a"]}\n'
                     + "".join(f'{{"id": "q{i}"}}\n' for i in range(3, 6)), encoding="utf-8")
    _one_line(*_err(capsys, ["diagnose", "--responses", _responses(tmp_path), "--items", str(items)]),
              r"items\.jsonl:4: item 'q2': one answer option")


def test_a_saved_fit_with_equal_difficulties_is_named(tmp_path, capsys):
    path = tmp_path / "flat.json"
    _fit(difficulty=np.zeros(3)).save(path)
    _one_line(*_err(capsys, ["diagnose", "--fit", str(path)]), r"flat\.json: all 3 fitted difficulties are equal")


# -- 7. help texts, and options that were ignored without a word ---------------------------------


def test_help_says_what_calibrate_writes_and_fit_offers_no_fit_option(capsys):
    for cmd in ("calibrate", "fit"):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        text = capsys.readouterr().out
        if cmd == "calibrate":
            assert '{"id": ...}' in " ".join(text.split())
        else:
            assert "--fit" not in text


def test_items_beside_a_benchmark_are_refused(tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "x"}\n', encoding="utf-8")
    _one_line(*_err(capsys, ["diagnose", "--benchmark", "demo", "--items", str(items)]),
              r"--items .*items\.jsonl: --benchmark demo brings its own items")


@pytest.mark.parametrize("extra", [["--engine", "nuts"], ["--model", "2pl"], ["--no-guessing"], ["--draws", "50"]])
def test_fit_options_beside_a_saved_fit_are_refused(tmp_path, capsys, extra):
    path = tmp_path / "fit.json"
    _fit().save(path)
    _one_line(*_err(capsys, ["diagnose", "--fit", str(path), *extra]), rf"{extra[0]}: --fit .*fit\.json is a saved fit")


@pytest.mark.parametrize("argv, pattern", [
    (["--chains", "0"], r"argument --chains: must be at least 1"),
    (["--warmup", "-5"], r"argument --warmup: must be 0 or more"),
])
def test_out_of_range_sampler_options_are_refused_with_any_engine(tmp_path, capsys, argv, pattern):
    out = tmp_path / "fit.json"
    _usage_error(capsys, ["fit", "--benchmark", "demo", "--out", str(out), *argv], pattern)
    assert not out.exists()


def test_items_beside_a_saved_fit_must_be_the_fits(tmp_path, capsys):
    """`diagnose --fit F --items other.jsonl` ignored the items file, whoever's it was."""
    fit_path = tmp_path / "fit.json"
    assert main(["fit", "--responses", _responses(tmp_path), "--out", str(fit_path)]) == 0
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"id": f"x{i}", "problem": "?", "answer": "1"}) + "\n" for i in range(6)))
    capsys.readouterr()
    _one_line(*_err(capsys, ["diagnose", "--fit", str(fit_path), "--items", str(other)]),
              r"--items .*other\.jsonl: \d+ of the fit's \d+ items are not in it \(e\.g\. 'q\d'\)")
    mine = tmp_path / "mine.jsonl"
    mine.write_text("".join(json.dumps({"id": f"q{i}", "problem": "?", "answer": "1"}) + "\n" for i in range(6)))
    assert main(["diagnose", "--fit", str(fit_path), "--items", str(mine)]) == 0
    assert "warning" not in capsys.readouterr().err
    # items the fit never measured are said to be left out, not dropped quietly from every figure
    more = tmp_path / "more.jsonl"
    more.write_text(mine.read_text() + json.dumps({"id": "new1", "problem": "?", "answer": "2"}) + "\n")
    assert main(["diagnose", "--fit", str(fit_path), "--items", str(more)]) == 0
    assert (f"benchfill: warning: --items {more}: 1 of its items are not in the fit {fit_path} and are left out: "
            "new1") in capsys.readouterr().err  # fmt: skip


def test_diagnose_and_fit_read_the_guessing_floor_and_ids_of_a_spec(tmp_path, capsys):
    # a multiple-choice benchmark whose options field is not options/choices fitted with no floor in diagnose
    # and fit, while run fitted it with 1/4: --spec gives them what run reads
    rng = np.random.default_rng(3)
    items, rows = tmp_path / "items.jsonl", ["model,item_id,correct,trials"]
    with items.open("w") as fh:
        for i in range(12):
            fh.write(json.dumps({"qid": f"q{i}", "question": f"Pick {i}", "opts": ["a", "b", "c", "d"],
                                 "answer": "A"}) + "\n")
    for m in range(6):
        rows += [f"m{m},q{i},{rng.binomial(4, 0.3 + 0.05 * (i + m) % 0.6)},4" for i in range(12)]
    responses = _responses(tmp_path, "\n".join(rows) + "\n")
    spec = tmp_path / "spec.toml"
    spec.write_text('[benchmark]\nname = "quiz"\ntext_field = "question"\nanswer_field = "answer"\n'
                    'options_field = "opts"\nevaluator = "multiple_choice"\nid_field = "qid"\n')
    base = ["diagnose", "--responses", responses, "--items", str(items)]
    _one_line(main(base), capsys.readouterr().err, r"items\.jsonl:1: missing or invalid field 'id'")
    assert main([*base, "--spec", str(spec)]) == 0
    assert "guessing floor on" in capsys.readouterr().out.splitlines()[0]
    assert main(["fit", "--responses", responses, "--items", str(items), "--spec", str(spec),
                 "--out", str(tmp_path / "fit.json")]) == 0
    capsys.readouterr()
    assert np.allclose(IrtFit.load(tmp_path / "fit.json").chance, 0.25)
    # calibrate's selection copies the items' lines, keyed by the spec's id_field (a KeyError 'id' before)
    kept = tmp_path / "kept.jsonl"
    assert main(["calibrate", "--responses", responses, "--items", str(items), "--spec", str(spec), "--size", "4",
                 "--out", str(kept)]) == 0
    capsys.readouterr()
    lines = kept.read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(x)["opts"] == ["a", "b", "c", "d"] for x in lines)
    # nor is the spec an output's place
    _one_line(main(["fit", "--responses", responses, "--items", str(items), "--spec", str(spec),
                    "--out", str(spec)]), capsys.readouterr().err, r"--spec")
    _one_line(main(["diagnose", "--responses", responses, "--spec", str(spec)]), capsys.readouterr().err,
              r"^benchfill: error: --spec .*spec\.toml: describes the items of --items; give that file too")
    _one_line(main(["diagnose", "--benchmark", "demo", "--spec", str(spec)]), capsys.readouterr().err,
              r"--benchmark demo brings its own spec")


def test_an_output_onto_the_files_a_benchmark_is_read_from_is_refused(tmp_path, shared_data, capsys):
    # calibrate --benchmark aime25 --out aime25/items.jsonl pruned the benchmark to 10 items in place, and fit
    # wrote its JSON over aime25/responses.csv
    import shutil

    shutil.copytree(shared_data / "aime25", tmp_path / "aime25")
    items, responses = tmp_path / "aime25" / "items.jsonl", tmp_path / "aime25" / "responses.csv"
    before = items.read_bytes(), responses.read_bytes()
    _one_line(main(["calibrate", "--benchmark", "aime25", "--data-dir", str(tmp_path), "--size", "10",
                    "--out", str(items)]), capsys.readouterr().err, r"--benchmark aime25 items")
    _one_line(main(["fit", "--benchmark", "aime25", "--data-dir", str(tmp_path), "--out", str(responses)]),
              capsys.readouterr().err, r"--benchmark aime25 responses")
    assert (items.read_bytes(), responses.read_bytes()) == before
