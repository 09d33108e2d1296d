"""What the measuring commands do with files that are not what they should be, and with outputs they
cannot write: one line naming the file or field, a non-zero exit, and nothing half-written."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from benchfill.cli import main
from benchfill.irt.fit import IrtFit

MATRIX = "model,item_id,correct,trials\n" + "".join(
    f"m{m},q{i},{min(i + m, 4) if (i + m) % 3 else 0},4\n" for m in range(4) for i in range(6))


def _err(capsys, argv) -> tuple[int, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, err


def _one_line(rc: int, err: str, pattern: str) -> None:
    assert rc != 0, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(pattern, err), err


def _matrix(tmp_path, text: str = MATRIX, name: str = "r.csv"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _fit(**over) -> IrtFit:
    kw = dict(model="1pl", engine="map", models=("a", "b"), item_ids=("x", "y", "z"), ability=np.zeros(2),
              ability_se=np.ones(2), difficulty=np.array([-1.0, 0.0, 1.0]), difficulty_se=np.full(3, 0.2),
              chance=np.zeros(3))
    return IrtFit(**{**kw, **over})


def test_a_fit_without_draws_removes_the_draws_an_earlier_fit_left(tmp_path):
    path = tmp_path / "fit.json"
    draws = np.random.default_rng(0).normal(size=(50, 3))
    _fit(engine="nuts", difficulty_draws=draws, ability_draws=np.zeros((50, 2))).save(path)
    assert IrtFit.load(path).difficulty_draws is not None
    _fit().save(path)  # the same path, now a MAP fit
    assert IrtFit.load(path).difficulty_draws is None  # not the old posterior under a new fit
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit.json"]


def _set(key, value):
    def change(d):
        d[key] = value
    return change


def _drop(key):
    return lambda d: d.pop(key)


def _shorten(key):
    return _set(key, [0.0, 1.0])


def _null_first(key):
    return lambda d: d[key].__setitem__(0, None)


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ("[1, 2]", r"fit\.json: not a fit \(a JSON object was expected"),
        ("{not json", r"fit\.json: not a readable fit"),
        (_set("b_min", "x"), r"fit\.json: field 'b_min' must be a finite number, found 'x'"),
        (_drop("difficulty"), r"fit\.json: not a fit: field 'difficulty' is missing"),
        (_shorten("difficulty"), r"fit\.json: field 'difficulty' has 2 values for 3 items"),
        (_null_first("ability"), r"fit\.json: field 'ability' holds a value that is not a finite number"),
    ],
)
def test_a_malformed_saved_fit_is_named_with_its_field(tmp_path, capsys, change, pattern):
    path = tmp_path / "fit.json"
    if isinstance(change, str):
        path.write_text(change)
    else:
        d = _fit().to_dict()
        change(d)
        path.write_text(json.dumps(d))
    r = str(_matrix(tmp_path))
    for argv in (["diagnose", "--fit", str(path)],
                 ["detect", "--before", r, "--after", r, "--model", "m0", "--fit", str(path)]):
        _one_line(*_err(capsys, argv), pattern)


def test_corrupt_draws_are_named_as_the_draws_file(tmp_path, capsys):
    path = tmp_path / "fit.json"
    draws = np.random.default_rng(0).normal(size=(50, 3))
    _fit(engine="nuts", difficulty_draws=draws, ability_draws=np.zeros((50, 2))).save(path)
    named = json.loads(path.read_text())["draws_file"]
    (tmp_path / named).write_bytes(b"not an npz")
    _one_line(*_err(capsys, ["diagnose", "--fit", str(path)]), r"fit\.json\.draws-[0-9a-f]+\.npz: not readable posterior draws")
    (tmp_path / named).unlink()
    _one_line(*_err(capsys, ["diagnose", "--fit", str(path)]), r"fit\.json: its posterior draws .* are missing")


def test_a_save_cut_short_leaves_the_old_fit_with_its_own_draws(tmp_path, monkeypatch):
    """Killed between writing the new draws and renaming the new JSON into place, the old pair stands."""
    from pathlib import Path

    path = tmp_path / "fit.json"
    rng = np.random.default_rng(0)
    old = _fit(engine="nuts", difficulty_draws=rng.normal(size=(40, 3)), ability_draws=np.zeros((40, 2)))
    old.save(path)
    new = _fit(engine="nuts", difficulty_draws=rng.normal(5, 1, size=(40, 3)), ability_draws=np.zeros((40, 2)))
    real = Path.replace

    def crash_on_the_json(self, target):
        if Path(target).name == "fit.json":
            raise KeyboardInterrupt  # the moment a kill would land
        return real(self, target)

    monkeypatch.setattr(Path, "replace", crash_on_the_json)
    with pytest.raises(KeyboardInterrupt):
        new.save(path)
    monkeypatch.setattr(Path, "replace", real)
    back = IrtFit.load(path)
    assert np.array_equal(back.difficulty_draws, old.difficulty_draws)  # not the new fit's posterior
    new.save(path)  # the next save finishes and leaves one draws file, its own
    assert np.array_equal(IrtFit.load(path).difficulty_draws, new.difficulty_draws)
    assert len(list(tmp_path.glob("fit.json.draws*.npz"))) == 1 and not list(tmp_path.glob("*.tmp"))
    assert not list(tmp_path.glob(".*"))


def test_saves_to_one_path_at_once_each_land_whole(tmp_path):
    # One temp name per path (fit.json.tmp) let one save rename the other's file away: FileNotFoundError.
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "fit.json"
    fits = [_fit(difficulty=np.full(3, float(k))) for k in range(2)]
    with ThreadPoolExecutor(2) as pool:
        for _ in range(40):
            list(pool.map(lambda f: f.save(path), fits))
    assert float(IrtFit.load(path).difficulty[0]) in (0.0, 1.0)
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_nuts_fits_saved_to_one_path_at_once_keep_the_draws_their_json_names(tmp_path):
    # Each save removes the draws files its own fit does not name: unserialized, a save whose JSON landed
    # first removed the draws of the one whose JSON landed last, and that fit no longer loaded.
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "fit.json"
    rng = np.random.default_rng(0)
    fits = [_fit(engine="nuts", difficulty_draws=rng.normal(k, 1, size=(400, 3)), ability_draws=np.zeros((400, 2)))
            for k in range(2)]
    with ThreadPoolExecutor(2) as pool:
        for _ in range(30):
            list(pool.map(lambda f: f.save(path), fits))
            back = IrtFit.load(path)  # its draws are there
            assert any(np.array_equal(back.difficulty_draws, f.difficulty_draws) for f in fits)
            named = json.loads(path.read_text())["draws_file"]
            assert sorted(p.name for p in tmp_path.iterdir()) == ["fit.json", named]  # no lock or temp file left


def test_a_fit_of_the_same_items_in_another_order_is_the_same_fit(tmp_path, capsys):
    r = _matrix(tmp_path)
    fit = tmp_path / "fit.json"
    assert main(["fit", "--responses", str(r), "--out", str(fit)]) == 0
    capsys.readouterr()
    lines = MATRIX.splitlines()
    shuffled = _matrix(tmp_path, "\n".join([lines[0], *reversed(lines[1:])]) + "\n", "shuffled.csv")
    assert main(["diagnose", "--responses", str(r), "--fit", str(fit), "--json"]) == 0
    before = json.loads(capsys.readouterr().out)
    assert main(["diagnose", "--responses", str(shuffled), "--fit", str(fit), "--json"]) == 0
    after = json.loads(capsys.readouterr().out)
    # (items tied in difficulty may trade places as a gap's neighbour; the axis is the same)
    assert [g["width"] for g in after["gaps"]] == [g["width"] for g in before["gaps"]]
    assert after["ddm"] == before["ddm"]
    other = _matrix(tmp_path, MATRIX.replace("q5", "q9"), "other.csv")
    _one_line(*_err(capsys, ["diagnose", "--responses", str(other), "--fit", str(fit)]),
              r"fit\.json: the fit's items differ from the responses' items \(6 against 6; e\.g\. 'q9'")


def test_a_failing_fit_command_writes_no_fit(tmp_path, capsys):
    one_item = _matrix(tmp_path, "model,item_id,correct,trials\na,q,1,2\nb,q,0,2\n", "one.csv")
    out = tmp_path / "f.json"
    _one_line(*_err(capsys, ["fit", "--responses", str(one_item), "--loo", "--out", str(out)]),
              r"one\.csv: leave-one-model-out needs at least 3 models and 2 items, found 2 and 1")
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "name", "pattern"),
    [
        ("model,item_id,correct,trials\na,q,0,0\nb,q,0,0\n", "r.csv", r"r\.csv: no responses: every row has trials 0"),
        ('{"model": null, "item_id": "q", "correct": 1, "trials": 1}\n', "r.jsonl",
         r"r\.jsonl:1: field 'model' must be a string or an integer, got null"),
        ('{"model": "a", "item_id": 1.5, "correct": 1, "trials": 1}\n', "r.jsonl",
         r"r\.jsonl:1: field 'item_id' must be a string or an integer, got 1\.5"),
        ("model,item_id,correct,trials\na,q,1e30,1e30\nb,q,0,1\n", "r.csv", r"r\.csv:2: field 'correct' is implausibly large"),
    ],
)
def test_responses_that_say_nothing_or_too_much_are_refused(tmp_path, capsys, text, name, pattern):
    _one_line(*_err(capsys, ["fit", "--responses", str(_matrix(tmp_path, text, name)),
                             "--out", str(tmp_path / "f.json")]), pattern)
    assert not (tmp_path / "f.json").exists()


def test_a_byte_order_mark_is_not_part_of_the_header(tmp_path, capsys):
    r = tmp_path / "excel.csv"
    r.write_bytes(b"\xef\xbb\xbf" + MATRIX.replace("\n", "\r\n").encode())
    assert main(["diagnose", "--responses", str(r), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_items"] == 6


def test_outputs_that_cannot_be_written_are_one_line(tmp_path, capsys):
    r = str(_matrix(tmp_path))
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    _one_line(*_err(capsys, ["fit", "--responses", r, "--out", str(tmp_path / "afile" / "x.json")]), r"afile")
    _one_line(*_err(capsys, ["fit", "--responses", r, "--out", str(tmp_path / "adir")]), r"--out .*adir")
    _one_line(*_err(capsys, ["diagnose", "--responses", r, "--plot", str(tmp_path / "adir")]), r"adir")
    (tmp_path / "pout" / "trajectories.png").mkdir(parents=True)
    _one_line(*_err(capsys, ["profile", "--responses", r, "--out", str(tmp_path / "pout")]),
              r"trajectories\.png is a folder")
    assert sorted(p.name for p in (tmp_path / "pout").iterdir()) == ["trajectories.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile", "pout", "r.csv"]  # no temp files


def test_input_text_that_is_not_utf8_is_named(tmp_path, capsys):
    r = str(_matrix(tmp_path))
    bad = tmp_path / "target.txt"
    bad.write_bytes(b"0.1\n\xff\xfe0.5\n")
    _one_line(*_err(capsys, ["diagnose", "--responses", r, "--target", str(bad)]), r"target\.txt: not a UTF-8 text file")
    _one_line(*_err(capsys, ["calibrate", "--responses", r, "--size", "3", "--reference", str(bad)]),
              r"target\.txt: not a UTF-8 text file")


@pytest.mark.parametrize(
    "argv",
    [
        ["diagnose", "--seed", "-1"],
        ["calibrate", "--size", "3", "--n-random", "0"],
        ["calibrate", "--size", "0"],
        ["profile", "--subset", "0"],
        ["profile", "--subset", "3", "--repeats", "0"],
    ],
)
def test_out_of_range_numbers_are_refused_before_any_work(tmp_path, capsys, argv):
    out = tmp_path / "kept.jsonl"
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--responses", str(_matrix(tmp_path)), *(["--out", str(out)] if argv[0] == "calibrate" else [])])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert re.search(r"error: argument --[a-z-]+: must be", err), err
    assert not out.exists()


def test_a_reference_ranking_without_responses_is_refused_not_dropped(tmp_path, capsys):
    fit = tmp_path / "fit.json"
    _fit().save(fit)
    ref = tmp_path / "ref.csv"
    ref.write_text("a,0.5\nb,0.7\n")
    _one_line(*_err(capsys, ["calibrate", "--fit", str(fit), "--size", "2", "--reference", str(ref)]),
              r"ranking agreement needs the responses")


def test_json_output_is_standard_json_without_nan():
    """A figure that does not exist (a correlation over tied values) is null: NaN is not JSON."""
    from benchfill.cli.output import dumps

    text = dumps({"rho": float("nan"), "se": np.float64("inf"), "z": np.array([0.1, np.nan]), "n": np.int64(3)})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}")) == {
        "rho": None, "se": None, "z": [0.1, None], "n": 3}


def test_a_reference_ranking_that_ranks_nothing_is_refused(tmp_path, capsys):
    r = str(_matrix(tmp_path))
    for text, pattern in (("m0,0.5\nm1,0.5\nm2,0.5\nm3,0.5\n", r"every model has the same score"),
                          ("m0,0.5\nm1,nan\nm2,0.1\nm3,0.2\n", r"the score of model 'm1' is not a finite number")):
        ref = tmp_path / "ref.csv"
        ref.write_text(text)
        _one_line(*_err(capsys, ["calibrate", "--responses", r, "--size", "3", "--reference", str(ref)]),
                  r"ref\.csv: " + pattern)


def test_library_inputs_a_user_can_get_wrong_are_named():
    from pathlib import Path

    from benchfill.coverage import ddm, gaps
    from benchfill.data import guessing_floor
    from benchfill.errors import ConfigError, DataError
    from benchfill.matrix import ResponseMatrix
    from benchfill.measure.detect import detect

    ones = np.ones((2, 2), dtype=int)
    # DataError, a BenchfillError, as a file's errors are (a plain ValueError escaped `except BenchfillError`)
    with pytest.raises(DataError, match=r"^ResponseMatrix: item 'y': guessing floor 1\.0 is not in \[0, 1\)"):
        ResponseMatrix(("a", "b"), ("x", "y"), ones, ones, np.array([0.25, 1.0]))
    with pytest.raises(DataError, match=r"^mine\.csv: correct > trials for model 'b' on item 'x'"):
        ResponseMatrix(("a", "b"), ("x", "y"), np.array([[1, 1], [3, 1]]), ones * 2, source="mine.csv")
    with pytest.raises(DataError, match="correct must hold whole numbers"):
        ResponseMatrix(("a", "b"), ("x", "y"), np.array([[0.5, 1], [1, 1]]), ones)
    with pytest.raises(DataError, match="correct must have shape"):
        ResponseMatrix(("a", "b"), ("x", "y"), np.ones((2, 3), dtype=int), ones)
    # a fit of such a matrix saved, but did not load again ("field 'item_ids' names 'x' twice")
    with pytest.raises(DataError, match=r"^ResponseMatrix: item_ids names 'x' twice$"):
        ResponseMatrix(("a", "b"), ("x", "x"), ones, ones)
    with pytest.raises(DataError, match=r"^ResponseMatrix: models names 'a' twice$"):
        ResponseMatrix(("a", "a"), ("x", "y"), ones, ones)
    m = ResponseMatrix(("a", "b"), ("x", "y"), [[1, 0], [1, 1]], [[1, 1], [1, 1]])  # lists are fine
    assert m.correct.dtype == np.int64
    # Hugging Face's multiple-choice layout (ARC): choices as {"text": [...], "label": [...]}
    assert guessing_floor({"choices": {"text": ["a", "b", "c", "d"], "label": list("ABCD")}}) == 0.25
    with pytest.raises(ConfigError, match="k must be at least 1"):
        gaps([0.1, 0.4], k=0)
    assert [(g.left, g.right) for g in gaps([0.2, 0.6], k=2)] == [(0.2, 0.6), (0.6, 1.0)]  # a tie: leftmost first
    with pytest.raises(DataError, match="difficulty must map item ids to z"):
        detect(m, m, model_before="a", model_after="b", difficulty=np.array([0.1, 0.9]))
    assert ddm([0.25, 0.75], Path("uniform")) == pytest.approx(0.0)  # a Path is read like its name


def test_a_one_option_item_is_named_not_fitted_to_nan(tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"q{i}", "options": ["yes"] if i == 2 else ["a", "b"]}) + "\n"
                             for i in range(6)))
    _one_line(*_err(capsys, ["diagnose", "--responses", str(_matrix(tmp_path)), "--items", str(items)]),
              r"item 'q2': one answer option gives a guessing floor of 1")


def test_k_fold_keeps_three_items_in_every_held_out_fold():
    from benchfill.errors import ConfigError
    from benchfill.predict.evaluate import make_splits

    assert all(len(test) >= 3 for _, _, test in make_splits("kfold", 15, folds=5))
    with pytest.raises(ConfigError, match=r"need 2 <= K <= 5 for 15 items \(each fold holds out at least 3\)"):
        make_splits("kfold", 15, folds=7)  # folds of two: spearman gives them no rank correlation
    assert len(make_splits("kfold", 15, folds=15, min_test=1)) == 15  # out-of-fold predictions only


def test_paired_arguments_of_the_library_must_pair(tmp_path, capsys):
    from benchfill.errors import ConfigError
    from benchfill.measure.before_after import before_after
    from benchfill.predict.evaluate import pairwise_accuracy, spearman
    from benchfill.pruning import calibrate

    with pytest.raises(ValueError, match="pred has 3 values, target 5"):
        pairwise_accuracy([1, 2, 3], [1, 3, 2, 0, 5])
    with pytest.raises(ValueError, match="pred has 3 values, target 2"):
        spearman([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="groups: 2 labels for 3 items"):
        pairwise_accuracy([1, 2, 3], [1, 3, 2], groups=["a", "a"])
    with pytest.raises(ValueError, match="new_se: 1 standard errors for 2 new items"):
        before_after([0.2, 0.5], [0.8, 0.9], [0.05], k=2)
    from benchfill.data import read_responses

    m = read_responses(_matrix(tmp_path))
    with pytest.raises(ConfigError, match="reference: 2 scores for 4 models"):
        calibrate(np.linspace(0, 1, 6), 3, matrix=m, item_ids=list(m.item_ids), reference=[1.0, 2.0])
    one = _matrix(tmp_path, "model,item_id,correct,trials\na,q,1,2\nb,q,0,2\n", "one.csv")
    _one_line(*_err(capsys, ["diagnose", "--responses", str(one)]), r"one item; coverage gaps need at least three")


def test_a_probe_the_given_matrix_also_holds_keeps_its_own_row_when_the_panel_joins_it():
    # Some probes not in the given matrix: the panel's rollouts join it, one row per probe. A probe the
    # matrix also held came in twice under one name (now refused); the given row is renamed instead.
    from benchfill.engine.backend import _stack, panel_probes
    from benchfill.irt import fit as irt_fit
    from benchfill.matrix import ResponseMatrix

    rng = np.random.default_rng(1)
    given = ResponseMatrix(("m1", "p1", "m2"), tuple(f"q{i}" for i in range(8)), rng.integers(0, 5, (3, 8)),
                           np.full((3, 8), 4))
    panel = ResponseMatrix(("p1", "p2"), ("q0", "q3", "q9"), np.array([[4, 3, 1], [1, 0, 0]]), np.full((2, 3), 4))
    both = _stack(given, panel)
    assert both.models == ("m1", "p1 (given)", "m2", "p1", "p2") and both.n_items == 9
    assert list(both.correct[3, [0, 3, 8]]) == [4, 3, 1] and both.trials[3].sum() == 12  # p1: the panel's row
    fit = irt_fit(both, engine="map", seed=0)
    p1, _ = panel_probes(fit, [("p1", 4), ("p2", 4)])
    assert p1.ability == pytest.approx(float(fit.ability[3]))


def test_a_new_fit_removes_only_the_draws_of_the_fit_it_replaces(tmp_path):
    # mv fit.json nuts-final.json, then a new fit.json: every fit.json.draws*.npz went, the kept fit could no
    # longer load and a user's own file of that pattern was deleted
    path = tmp_path / "fit.json"
    rng = np.random.default_rng(1)
    kept = _fit(engine="nuts", difficulty_draws=rng.normal(size=(40, 3)), ability_draws=np.zeros((40, 2)))
    kept.save(path)
    path.rename(tmp_path / "nuts-final.json")
    mine = tmp_path / "fit.json.draws-myanalysis.npz"
    mine.write_bytes(b"mine")
    first = _fit(engine="nuts", difficulty_draws=rng.normal(size=(40, 3)), ability_draws=np.zeros((40, 2)))
    first.save(path)
    _fit().save(path)  # a MAP fit over the NUTS one: that one's draws go
    assert np.array_equal(IrtFit.load(tmp_path / "nuts-final.json").difficulty_draws, kept.difficulty_draws)
    assert mine.read_bytes() == b"mine"
    assert len(list(tmp_path.glob("fit.json.draws-*.npz"))) == 2  # the kept fit's and the user's
    # a copy kept before a refit keeps its posterior too
    second = _fit(engine="nuts", difficulty_draws=rng.normal(size=(40, 3)), ability_draws=np.zeros((40, 2)))
    second.save(path)
    (tmp_path / "fit.bak.json").write_bytes(path.read_bytes())
    _fit().save(path)
    assert np.array_equal(IrtFit.load(tmp_path / "fit.bak.json").difficulty_draws, second.difficulty_draws)
