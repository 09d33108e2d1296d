"""Defects a QA pass found in `predict`, `profile` and `detect`: an --out that is a scorer cache not yet
made, settings that can never flag or detect anything, p printed as 0, and notes that named flags the user
never gave."""

from __future__ import annotations

import os

import pytest

from benchfill.cli import main
from benchfill.cli.output import check_out_file
from benchfill.errors import ConfigError

# -- an --out that is an input the command makes as it works ---------------------------------------


def test_train_refuses_an_out_that_is_its_scorer_cache_before_the_cache_exists(shared_data, tmp_path, capsys,
                                                                                monkeypatch):
    # The cache is written answer by answer as the scorer works, then the predictor replaced it: the first run
    # lost every answer; the refusal must not wait for the file to exist.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    rc = main(["predict", "train", "--benchmark", "aime25", "--data-dir", str(shared_data), "--families",
               "length,entropy", "--scorer", "m@http://127.0.0.1:1/v1", "--scorer-cache", "t.json",
               "--out", str(tmp_path / "sub" / ".." / "t.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"benchfill: error: --out {str(tmp_path / 'sub' / '..' / 't.json')!r}: is the "
                               "--scorer-cache file, which writing would overwrite; give another path"]
    assert not (tmp_path / "t.json").exists()


def test_score_refuses_an_out_that_is_its_scorer_cache_before_the_cache_exists(tmp_path, capsys):
    cache = tmp_path / "c.jsonl"
    rc = main(["predict", "score", "--predictor", str(tmp_path / "p.json"), "--items", str(tmp_path / "i.jsonl"),
               "--scorer-cache", str(cache), "--out", str(cache)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"benchfill: error: --out {str(cache)!r}: is the --scorer-cache file, which writing "
                               "would overwrite; give another path"]


def test_an_out_that_is_a_hard_link_to_an_input_is_still_refused(tmp_path):
    given = tmp_path / "in.jsonl"
    given.write_text("{}\n")
    os.link(given, tmp_path / "other.jsonl")
    with pytest.raises(ConfigError, match="is the --items file"):
        check_out_file(str(tmp_path / "other.jsonl"), "--out", {"--items": str(given)})
    check_out_file(str(tmp_path / "new.jsonl"), "--out", {"--items": str(given), "--cache": None})  # another path


# -- profile: settings that could never flag an item -----------------------------------------------


@pytest.fixture
def small_responses(tmp_path):
    rows = ["model,item_id,correct,trials"]
    for m, skill in (("m1", 0), ("m2", 1), ("m3", 2)):
        rows += [f"{m},q{i},{min(skill + i % 2, 2)},2" for i in range(4)]
    path = tmp_path / "r.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_profile_refuses_an_alpha_its_draws_cannot_reach(small_responses, capsys):
    # the smallest o is 1/(draws + 1) = .05 with 19 draws: alpha .01 flagged nothing and said "no item flagged"
    rc = main(["profile", "--responses", str(small_responses), "--draws", "19", "--alpha", "0.01", "--no-cache"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.strip().splitlines() == [
        "benchfill: error: --alpha 0.01 with --draws 19: no item can be flagged, as o is never below 1/(19 + 1); "
        "give --draws 99 or more"]
    assert main(["profile", "--responses", str(small_responses), "--draws", "99", "--alpha", "0.01",
                 "--no-cache", "--json"]) == 0  # the fewest it names are enough
    capsys.readouterr()
    rc = main(["profile", "--responses", str(small_responses), "--draws", "9999", "--alpha", "0.00001"])
    assert rc == 2 and capsys.readouterr().err.strip().splitlines() == [
        "benchfill: error: --alpha 1e-05: no item can be flagged, as o is never below 1/(9999 + 1) even at the most "
        "--draws; give --alpha 0.0001 or more"]


def test_the_library_refuses_an_alpha_its_draws_cannot_reach(small_responses):
    from benchfill.data import read_responses
    from benchfill.measure.profiles import min_draws, profile

    with pytest.raises(ConfigError, match=r"^alpha 0.02 with draws 19: .* give draws 49 or more$"):
        profile(read_responses(small_responses), alpha=0.02, draws=19, cache_dir=False)
    # 1/(B + 1) <= alpha at B and not at B - 1, through the float rounding of 1/alpha
    for alpha, b in ((0.05, 19), (0.01, 99), (0.001, 999), (0.03, 33), (1e-4, 9999)):
        assert min_draws(alpha) == b and 1 / (b + 1) <= alpha < 1 / b


def test_profile_refuses_repeats_without_subset(small_responses, capsys):
    # --repeats only sets --subset's draws; alone it was ignored without a word
    rc = main(["profile", "--responses", str(small_responses), "--repeats", "5", "--no-cache"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.strip().splitlines() == [
        "benchfill: error: --repeats 5: sets how many subsets --subset draws, and no --subset is given; give "
        "--subset K or leave --repeats out"]


# -- detect: permutations too few for alpha, p printed as 0, bands that read alike ---------------------


@pytest.fixture
def gained(tmp_path):
    """One model's responses before and after a large gain on 40 items of 8 rollouts."""
    b, a = tmp_path / "before.csv", tmp_path / "after.csv"
    b.write_text("model,item_id,correct,trials\n" + "".join(f"m,q{i},{i % 3},8\n" for i in range(40)))
    a.write_text("model,item_id,correct,trials\n" + "".join(f"m,q{i},{i % 3 + 4},8\n" for i in range(40)))
    return b, a


def test_detect_refuses_permutations_too_few_for_alpha(gained, capsys):
    # 10 permutations: p is never below 1/11 = 0.0909, so the test could only say "no improvement detected"
    b, a = gained
    rc = main(["detect", "--before", str(b), "--after", str(a), "--permutations", "10"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.strip().splitlines() == [
        "benchfill: error: --permutations 10 with --alpha 0.05: no improvement can be detected, as p is never below "
        "1/(10 + 1); give --permutations 20 or more, or 0 (exact)"]
    assert main(["detect", "--before", str(b), "--after", str(a), "--permutations", "20"]) == 0  # the fewest named
    assert "; improvement detected at p < 0.05" in capsys.readouterr().out
    assert main(["detect", "--before", str(b), "--after", str(a), "--permutations", "0"]) == 0  # exact still runs
    capsys.readouterr()


def test_the_library_refuses_permutations_too_few_for_alpha(gained):
    from benchfill.data import read_responses
    from benchfill.errors import DataError
    from benchfill.measure.detect import check_permutations, detect, min_permutations

    b, a = (read_responses(p, min_models=1) for p in gained)
    with pytest.raises(DataError, match=r"^permutations 99 with alpha 0.01: .* give permutations 100 or more"):
        detect(b, a, permutations=99, alpha=0.01)
    with pytest.raises(DataError, match=r"^alpha 1e-08: no improvement can be detected"):
        check_permutations(10_000_000, alpha=1e-8)
    for alpha, n in ((0.05, 20), (0.01, 100), (0.03, 33), (1e-7, 10_000_000)):  # 1/(n + 1) < alpha <= 1/n
        assert min_permutations(alpha) == n and 1 / (n + 1) < alpha <= 1 / n


def test_detect_prints_a_tiny_p_without_rounding_it_to_zero(gained, capsys):
    b, a = gained
    assert main(["detect", "--before", str(b), "--after", str(a), "--permutations", "0"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line == "one-sided stratified randomization test (exact): p = 4.14e-41; improvement detected at p < 0.05"
    # a Monte Carlo p that no permutation reached is the floor 1/(B + 1), said as such
    assert main(["detect", "--before", str(b), "--after", str(a), "--permutations", "1000"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line == ("one-sided stratified randomization test (1,000 permutations): p = 0.000999 (the floor "
                    "1/(1,000 + 1): no permutation reached the observed gain); improvement detected at p < 0.05")
    assert main(["detect", "--before", str(b), "--after", str(a), "--permutations", "1", "--alpha", "0.9"]) == 0
    assert "(1 permutation): p = 0.5 (the floor 1/(1 + 1)" in capsys.readouterr().out


def test_detect_bands_are_labelled_apart(gained, capsys):
    b, a = gained
    assert main(["detect", "--before", str(b), "--after", str(a), "--permutations", "0", "--bands", "1000"]) == 0
    bands = [ln.split(")")[0].split("]")[0] for ln in capsys.readouterr().out.splitlines()[3:]]
    assert bands[:2] == ["  [0.000, 0.001", "  [0.001, 0.002"] and bands[-1] == "  [0.999, 1.000"
    assert len(set(bands)) == 1000


# -- predict: the note that fewer folds are used ---------------------------------------------------

FOLDS_NOTE = "benchfill: warning: 15 items allow at most 5 folds of three or more; K-fold uses 5 folds, not 10"


@pytest.mark.parametrize("command", [["train", "--out", "p.json"], ["evaluate"]])
def test_predict_says_fewer_folds_once_as_a_warning_without_naming_a_flag_not_given(
        shared_data, tmp_path, capsys, monkeypatch, command):
    # train printed "--folds 10: 15 items allow 5 folds ..." bare and evaluate with the prefix; neither run
    # had been given --folds
    monkeypatch.chdir(tmp_path)
    rc = main(["predict", command[0], "--benchmark", "aime25", "--data-dir", str(shared_data), "--families", "length",
               *command[1:]])
    err = capsys.readouterr().err.splitlines()
    assert rc == 0 and [ln for ln in err if "folds of three" in ln] == [FOLDS_NOTE]


def test_the_library_logs_fewer_folds_as_a_warning(caplog):
    from benchfill.predict.predictor import fold_count

    with caplog.at_level("WARNING", logger="benchfill.predict"):
        assert fold_count(15, 10) == 5 and fold_count(60, 10) == 10 and fold_count(5, 10) == 1
    # at level WARNING, the message without the word (the CLI's handler says it)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", FOLDS_NOTE.removeprefix("benchfill: warning: "))]
