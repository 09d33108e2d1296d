"""The public API refuses wrong arguments in one line naming them (ConfigError / DataError), where it
used to fail deep inside with an AttributeError, a TypeError or a bare ValueError, or to answer anyway."""

from __future__ import annotations

import json

import numpy as np
import pytest

import benchfill
from benchfill.cli import main
from benchfill.coverage import gaps
from benchfill.errors import ConfigError, DataError
from benchfill.irt.fit import IrtFit


def _fit(n: int = 4) -> IrtFit:
    b = np.linspace(-1.0, 2.0, n)
    return IrtFit(model="1pl", engine="map", models=("m1", "m2"), item_ids=tuple(f"i{k}" for k in range(n)),
                  ability=np.zeros(2), ability_se=np.ones(2), difficulty=b, difficulty_se=np.ones(n),
                  chance=np.zeros(n))


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("bad", ["responses.csv", None])
def test_fit_wants_a_response_matrix(bad):
    with pytest.raises(ConfigError, match=r"^matrix: expected a ResponseMatrix, got (str|NoneType) .*read_responses"):
        benchfill.fit(bad)


@pytest.mark.parametrize(("kw", "match"), [
    (dict(correct=[3, 7], trials=[8, 8, 8], abilities=[0, 1, 2]), "one entry per probe, got 2, 3 and 3"),
    (dict(correct=[9, 7, 8], trials=[8, 8, 8], abilities=[0, 1, 2]), r"^correct: .*probe 0 has 9 of 8"),
    (dict(correct="abc", trials=[8, 8, 8], abilities=[0, 1, 2]), "^correct: expected numbers"),
    (dict(correct=None, trials=None, abilities=None), "^correct: expected numbers"),
    (dict(correct=[1, 2], trials=[8, 8], abilities=[0.0, np.nan]), "^abilities: .*finite"),
])
def test_online_calibrate_refuses_bad_counts(kw, match):
    with pytest.raises(DataError, match=match) as exc:
        benchfill.online_calibrate(**kw)
    _one_line(exc)
    assert isinstance(exc.value, ValueError)  # what it raised before, for callers that caught that


def test_online_calibrate_still_takes_numpy_and_lists():
    a = benchfill.online_calibrate(np.array([3, 7, 8]), np.array([8, 8, 8], dtype=np.int64), np.array([0., 1., 2.]))
    b = benchfill.online_calibrate([3, 7, 8], [8, 8, 8], [0, 1, 2])
    assert a.difficulty == pytest.approx(b.difficulty) and a.finite_mle


@pytest.mark.parametrize("call", [
    lambda: benchfill.diagnose(None),
    lambda: benchfill.diagnose("abc"),
    lambda: benchfill.calibrate(None, 5),
])
def test_coverage_entry_points_want_a_fit_or_difficulties(call):
    with pytest.raises(ConfigError, match="^fit_or_z: expected an IrtFit or an array") as exc:
        call()
    _one_line(exc)


def test_gaps_and_normalize_want_numbers():
    with pytest.raises(ConfigError, match="^z: expected an array of normalized difficulties, got str"):
        gaps("abc", k=1)
    with pytest.raises(ConfigError, match="^b: expected a difficulty"):
        _fit().normalize("x")
    with pytest.raises(ConfigError, match="^z: expected"):
        _fit().denormalize(None)
    np.testing.assert_allclose(_fit().normalize([-1.0, 2.0]), [0.0, 1.0])


def test_k_must_be_an_int():
    f = _fit()
    with pytest.raises(ConfigError, match="^k: expected an int, got str '5'"):
        benchfill.diagnose(f, k="5")
    with pytest.raises(ConfigError, match="^k: expected an int, got str '60'"):
        benchfill.calibrate(f, "60")
    with pytest.raises(ConfigError, match="^k: expected an int"):
        gaps([0.2, 0.5], k=2.0)
    # numpy's integers are ints
    assert benchfill.diagnose(f, k=np.int64(2)).k == 2
    assert len(benchfill.calibrate(f, np.int32(2)).selected) == 2


def test_diagnose_refuses_more_gaps_than_there_are():
    f = _fit(4)  # 4 items bound 5 gaps
    with pytest.raises(ConfigError, match="^k: 1000 gaps asked for, but 4 items bound only 5"):
        benchfill.diagnose(f, k=1000)
    assert benchfill.diagnose(f, k=5).top_k_sum == pytest.approx(1.0)
    # the default takes what there is
    assert benchfill.diagnose([0.5]).k == 2 and benchfill.diagnose(f).k == 5


def test_cli_diagnose_refuses_k_beyond_the_gaps(shared_data, capsys):
    responses = str(shared_data / "aime25" / "responses.csv")  # 15 items with responses: 16 gaps
    assert main(["diagnose", "--responses", responses, "--k", "100"]) == 2
    err = capsys.readouterr().err
    assert "--k 100:" in err and "at most 16 gaps" in err
    assert main(["diagnose", "--responses", responses, "--k", "16"]) == 0
    assert "top-16 gap sum" in capsys.readouterr().out


def test_release_argument_types(tmp_path):
    from benchfill.release import release

    run = tmp_path / "no-run"  # the types are refused before the run is read
    with pytest.raises(ConfigError, match="^version: expected a string .*got int 2"):
        release(run, 2)
    with pytest.raises(ConfigError, match="^remove: expected a mapping of item id -> who removed it and why, got list"):
        release(run, "2.0.1", remove=["ID"])
    with pytest.raises(ConfigError, match="^remove: expected item id"):
        release(run, "2.0.1", remove={"ID": 5})
    with pytest.raises(ConfigError, match="^run_dir: expected a path"):
        release(None, "2.0.1")


def test_decide_argument_types(tmp_path, shared_data):
    from test_review_support import CHILD_IDS, make_run

    from benchfill.review import ReviewBoard

    run = make_run(tmp_path, shared_data)
    with ReviewBoard(run, writable=True) as board:
        with pytest.raises(ConfigError, match="^reviewer: expected a string, got int 5"):
            board.decide(CHILD_IDS[0], 5, "accept")
        with pytest.raises(ConfigError, match="^decision: expected a string"):
            board.decide(CHILD_IDS[0], "ann", ["accept"])
        assert board.decisions() == []
        board.decide(CHILD_IDS[0], "ann", "edit", text="A new text.", answer=42)  # a numeric answer stays allowed


def test_load_targets_refuses_a_bare_string():
    from benchfill.predict import load_targets

    with pytest.raises(ConfigError, match=r"^names: expected a list of benchmark names, got str 'humaneval' "
                                          r"\(write \['humaneval'\]\)"):
        load_targets("humaneval")


def test_train_refuses_a_text_field_no_item_has():
    from benchfill.predict import labelled_items, train

    items = [{"id": f"t{k}", "prompt": "two primes" * (k % 9 + 1)} for k in range(30)]
    lab = labelled_items("toy", items, [float(k % 9) for k in range(30)])
    with pytest.raises(ConfigError, match=r"^text_field: no training item has a text field 'nosuch' \(they have 'prompt'\)"):
        train(lab, ["length"], folds=3, text_field="nosuch")
    assert train(lab, ["length"], folds=3, text_field="prompt")[0].text_field == "prompt"


def test_review_import_of_a_missing_file_says_so(tmp_path, capsys):
    missing = tmp_path / "nothere.csv"
    assert main(["review", "import", str(missing)]) == 2
    assert f"{missing}: no such file" in capsys.readouterr().err


def test_shapes_and_lists_a_library_caller_gets_wrong_are_refused_by_name(tmp_path):
    # each was a bare IndexError / KeyError deep inside, or an answer over the wrong items
    with pytest.raises(ConfigError, match=r"^fit_or_z: .*one value per item, got an array of shape \(2, 2\)$"):
        benchfill.diagnose(np.zeros((2, 2)))  # (was flattened into four items)
    with pytest.raises(DataError, match=r"^item_ids: 1 item ids for 3 difficulties$"):
        benchfill.calibrate(np.array([0.1, 0.5, 0.9]), 2, item_ids=["a"])
    responses = tmp_path / "r.csv"
    responses.write_text("model,item_id,correct,trials\nm1,a,1,2\nm2,a,2,2\n")
    with pytest.raises(DataError, match=r"^items\[0\]: expected an item with an 'id'"):
        benchfill.read_responses(responses, items=[{"q": 1}])
    f = _fit()
    with pytest.raises(DataError, match=r"^item_ids: not this fit's 4 items in another order \(e\.g\. 'zzz'\)$"):
        f.in_order(["i0", "i1", "i2", "zzz"])
    with pytest.raises(DataError, match=r"^item_ids: not this fit's 4 items"):
        f.in_order(["i1", "i0"])  # a subset (was taken without a word)
    with pytest.raises(DataError, match=r"\(e\.g\. 'i1'\)$"):
        f.in_order(["i0", "i1", "i2", "i3", "i1"])  # an item named twice, named
    assert f.in_order(["i3", "i2", "i1", "i0"]).item_ids == ("i3", "i2", "i1", "i0")
    # a generator of items is read once: checked, then used (it was used up by the check)
    assert benchfill.read_responses(responses, items=({"id": i} for i in ["a"])).item_ids == ("a",)
    assert benchfill.online_calibrate([1], [2], [0.0], chance=np.array(0.25)).se > 0  # a 0-d array is a number
    items = tmp_path / "i.jsonl"
    items.write_text('{"id": "a", "prompt": "x"}\n')
    assert benchfill.read_items(items, required="prompt")[0]["prompt"] == "x"  # one field, not its letters


def test_train_refuses_a_bare_string_for_its_lists():
    from benchfill.predict import labelled_items, train

    items = [{"id": f"t{k}", "prompt": "two primes" * (k % 9 + 1)} for k in range(30)]
    lab = labelled_items("toy", items, [float(k % 9) for k in range(30)])
    with pytest.raises(ConfigError, match=r"^families: expected a list of names, got str 'length' "
                                          r"\(write \['length'\]\)"):  # had been "unknown family 'l'"
        train(lab, "length", folds=3)


def test_import_logs_takes_one_path_as_a_list_of_one(tmp_path):
    from pathlib import Path

    from benchfill.importers import import_logs

    logs = Path(__file__).parent / "fixtures" / "lm_eval" / "logs" / "b"
    whole = import_logs("lm-eval", [logs], task="tiny_mc")
    for one in (logs, str(logs)):  # a str had been read letter by letter ("l: not found"); a Path, a TypeError
        got = import_logs("lm-eval", one, task="tiny_mc")
        assert got.models == whole.models and got.item_ids == whole.item_ids
    with pytest.raises(ConfigError, match=r"^paths: a path or a list of paths"):
        import_logs("lm-eval", 3)


def test_run_options_refuse_what_a_run_cannot_use_before_any_work(tmp_path):
    # extra.anchor_items had reached numpy ("Number of samples, -1") or int() ("invalid literal")
    from benchfill.run import dry_run

    for bad in ("x", -1, 0, 2.5, True):
        opts = benchfill.RunOptions(gaps=1, runs_dir=str(tmp_path / "runs"), extra={"anchor_items": bad})
        with pytest.raises(ConfigError, match=r"^extra: anchor_items must be a whole number of at least 1"):
            benchfill.run(opts)
        with pytest.raises(ConfigError, match=r"^extra: anchor_items"):
            dry_run(opts)
    assert not (tmp_path / "runs").exists()  # refused before a folder or a store was made
    with pytest.raises(ConfigError, match=r"^opts: a benchfill.RunOptions, got dict .*\(write RunOptions\(\*\*opts\)\)"):
        benchfill.run({"gaps": 1})
    # a numpy integer a caller computed is a whole number, kept as a plain int (the report is JSON)
    plan = dry_run(benchfill.RunOptions(gaps=np.int64(2), seed=np.int32(3),
                                                  runs_dir=str(tmp_path / "runs"), extra={"anchor_items": np.int64(5)}))
    json.dumps(plan)  # (a numpy integer is no JSON)


def test_a_fit_saved_to_a_folder_or_an_unwritable_place_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"a folder; give the file to write the fit to"):
        _fit().save(tmp_path)
    with pytest.raises(ConfigError, match=r"a folder; give the file to write the fit to"):
        _fit().save(".")
    with pytest.raises(OSError) as err:  # /proc takes no new file, even from root
        _fit().save("/proc/fit.json")
    assert err.value.filename == "/proc/fit.json"  # the temp file's name had been the one given
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError) as err:
        _fit().save(tmp_path / "file" / "fit.json")
    assert err.value.filename == str(tmp_path / "file")  # where it went wrong: a file where a folder must be


def test_anchor_items_none_is_the_default_and_numpy_numbers_are_numbers(tmp_path):
    from benchfill.run import run_id_for

    base = benchfill.RunOptions(gaps=1, runs_dir=str(tmp_path / "runs"))
    given = benchfill.RunOptions(gaps=1, runs_dir=str(tmp_path / "runs"), extra={"anchor_items": None})
    given.check()  # (a None had reached int() deep in the run)
    assert given.extra == {} and run_id_for(given) == run_id_for(base)
    close = benchfill.RunOptions(gaps=1, runs_dir=str(tmp_path / "runs"), tolerance=np.float32(0.02))
    close.check()  # (a float32 was "not a number in [0, 1]")
    assert type(close.tolerance) is float and run_id_for(close)  # (its id is made of JSON)


def test_a_fit_saved_by_a_relative_path_is_named_by_it(tmp_path, monkeypatch):
    monkeypatch.chdir("/proc")  # no new file here, even from root
    with pytest.raises(OSError) as err:
        _fit().save("fit.json")
    assert err.value.filename == "fit.json"
