"""Bad inputs that were taken without a word: a threshold beyond every score, a TSV or a header naming a
column twice where CSV is read, and an hf: name that is no Hugging Face repo id."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_review_support import CHILD_IDS, make_run

from benchfill.cli import main
from benchfill.data import read_responses
from benchfill.errors import ConfigError, DataError
from benchfill.hub import HubRef, load_items, parse
from benchfill.importers import ImportProblems, import_logs
from benchfill.importers.matrix import LogContent, Record, merge
from benchfill.measure.trajectory import read_answers
from benchfill.review import ReviewBoard, import_decisions

LOGS = Path(__file__).resolve().parent / "fixtures" / "lm_eval" / "logs"


# -- 1. --threshold beyond every score -----------------------------------------------------------------


def test_a_threshold_beyond_every_score_is_refused_naming_the_metric_and_its_range(tmp_path, capsys):
    # tiny_qa's overlap lies in [0, 1]: 5 made every trial wrong, -1 every trial right, without a word
    with pytest.raises(ImportProblems, match=r"^--threshold 5: metric 'overlap' scores lie in \[0, 0\.666667\]; "
                       r"the threshold is above every score, so every one of the 6 trials would count as wrong"):
        import_logs("lm-eval", [LOGS / "a"], task="tiny_qa", metric="overlap", threshold=5)
    with pytest.raises(ImportProblems, match=r"at or below every score, so every one of the \d+ trials would count "
                       r"as correct; choose one inside that range"):
        import_logs("lm-eval", [LOGS / "a"], task="tiny_qa", metric="overlap", threshold=-1)
    out = tmp_path / "out"
    assert main(["import", "lm-eval", str(LOGS / "a"), "--task", "tiny_qa", "--metric", "overlap",
                 "--threshold", "5", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--threshold 5: metric 'overlap'" in err[0], err
    assert not out.exists() or not any(out.iterdir())  # nothing half-written
    # a threshold inside the range is taken, as before
    res = import_logs("lm-eval", [LOGS / "a"], task="tiny_qa", metric="overlap", threshold=0.5)
    assert 0 < sum(res.correct.values()) < sum(res.trials.values())
    # on scores all alike any threshold makes one class: the data's, not a slip of the threshold's scale
    logs = [LogContent(f"{m}.jsonl", m, "t", [Record(m, "t", "t/1", 1, 1, f"{m}.jsonl")], span=(1.0, 1.0))
            for m in ("m1", "m2")]
    assert sum(merge("lm-eval", logs, metric="pass@10", threshold=0.5).correct.values()) == 2
    # from the library, a threshold that is no finite number (the CLI's --threshold is one already): a NaN
    # compared false with every score, every trial wrong without a word; a string was a TypeError
    for bad in (float("nan"), float("inf"), "0.5", True, 10**400):
        with pytest.raises(ConfigError, match=r"^threshold: expected a finite number, got "):
            import_logs("lm-eval", [LOGS / "a"], task="tiny_qa", metric="overlap", threshold=bad)
    import numpy as np

    for good in (np.float32(0.5), np.float64(0.5)):  # numpy's numbers are numbers
        assert import_logs("lm-eval", [LOGS / "a"], task="tiny_qa", metric="overlap", threshold=good).correct


# -- 2. a TSV given where a CSV is read ----------------------------------------------------------------


def test_a_tab_separated_responses_file_is_named_as_such(tmp_path, capsys):
    tsv = tmp_path / "x.tsv"
    tsv.write_text("model\titem_id\tcorrect\ttrials\nm1\ta\t1\t1\nm2\ta\t0\t1\n")
    with pytest.raises(DataError, match=r"x\.tsv:1: the header is separated by tabs, not commas; save the file as "
                       r"comma-separated CSV$"):
        read_responses(tsv)
    semi = tmp_path / "semi.csv"
    semi.write_text("model;item_id;correct;trials\nm1;a;1;1\n")
    with pytest.raises(DataError, match=r"semi\.csv:1: the header is separated by ';', not commas"):
        read_responses(semi)
    assert main(["diagnose", "--responses", str(tsv)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "separated by tabs" in err[0], err


# -- 3. a column named twice ---------------------------------------------------------------------------


def test_a_responses_header_naming_a_column_twice_is_refused(tmp_path):
    twice = tmp_path / "twice.csv"
    # the first 'correct' was read; the second (the one meant, say) was lost
    twice.write_text("model,item_id,correct,trials,correct\nm1,a,0,1,1\nm2,a,1,1,0\n")
    with pytest.raises(DataError, match=r"twice\.csv:1: the header names column 'correct' twice$"):
        read_responses(twice)
    # the empty names a spreadsheet's trailing commas leave are no columns, and may repeat
    trailing = tmp_path / "trailing.csv"
    trailing.write_text("model,item_id,correct,trials,,\nm1,a,0,1,,\nm2,a,1,1,,\n")
    assert read_responses(trailing).trials.sum() == 2


def test_a_review_sheet_naming_a_column_twice_is_refused(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    sheet = tmp_path / "sheet.csv"
    # DictReader kept the last 'decision' (empty): the row was skipped, its accept lost without a word
    sheet.write_text(f"item_id,reviewer,decision,decision\n{CHILD_IDS[0]},ann,accept,\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"sheet\.csv: the header names column 'decision' twice$"):
        import_decisions(run, sheet)
    with ReviewBoard(run) as board:
        assert board.decisions() == []


def test_an_answers_file_naming_a_column_twice_is_refused(tmp_path):
    answers = tmp_path / "answers.csv"
    answers.write_text("model,item_id,answer,answer\nm1,a,B,C\n")
    with pytest.raises(DataError, match=r"answers\.csv:1: the header names column 'answer' twice$"):
        read_answers(answers)


# -- 4. hf: names that are no Hub repo id --------------------------------------------------------------


@pytest.mark.parametrize("ref", ["hf:acme/..", "hf:acme/../../etc", "hf:../", "hf:acme/.", "hf:acme/", "hf:/",
                                 "hf:acme//quiz", "hf:a/b/c", "hf:acme/-quiz", "hf:acme/quiz.", "hf:ac me/quiz",
                                 "hf:acme/qu..iz", "hf:acme/qu--iz", "hf:acmé/quiz"])
def test_an_hf_name_that_is_no_repo_id_is_refused(ref, tmp_path):
    if ref in ("hf:../", "hf:/"):  # a path: the folder it names, as documented (hf:./my_copy)
        assert parse(ref).repo == ref[3:]
        return
    with pytest.raises(DataError, match=r"is not a Hub name|more than one '/'"):
        parse(ref)


def test_an_hf_name_never_reaches_outside_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    (data / "acme").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "rows.jsonl").write_text('{"id": 1, "question": "secret?"}\n')
    # data/acme/../../outside is tmp_path/outside: it was loaded as the dataset "acme/../../outside"
    with pytest.raises(DataError, match=r"part '\.\.' is not a Hub name"):
        load_items("hf:acme/../../outside", data_dir=data)
    with pytest.raises(DataError, match=r"part '\.\.' is not a Hub name"):  # a spec's hf_dataset, not parsed
        load_items(HubRef("acme/../../outside"), data_dir=data)
    # a path names its folder itself, never one under the data dir; a missing one says so
    assert [it["question"] for it in load_items("hf:./outside", data_dir=data)] == ["secret?"]
    with pytest.raises(DataError, match=r"hf:\./missing: no folder missing \(hf: and a path name a local dataset "
                       r"folder; a Hub dataset is hf:ORG/NAME\)"):
        load_items("hf:./missing", data_dir=data)
    assert parse("hf:acme/quiz-2.v1_x::test") == HubRef("acme/quiz-2.v1_x", None, "test")
    assert parse("hf:gsm8k") == HubRef("gsm8k")


def test_an_answers_file_with_a_byte_order_mark_is_read(tmp_path):
    # Excel's "CSV UTF-8" starts with one: read as part of the first column's name, every row "lacked" 'model'
    plain, marked = tmp_path / "plain.csv", tmp_path / "marked.csv"
    plain.write_text("model,item_id,answer\nm1,a,B\nm1,a,C\n")
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert read_answers(marked) == read_answers(plain)


def test_a_hub_name_that_is_also_a_folder_here_is_refused(tmp_path, monkeypatch):
    # datasets reads a name that is a path from the current directory as that path: a folder acme/quiz here
    # stood in for the Hub's acme/quiz (said to come from the cache)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "acme" / "quiz").mkdir(parents=True)
    (tmp_path / "acme" / "quiz" / "test.jsonl").write_text('{"id": 1, "question": "shadow?"}\n')
    (tmp_path / "data").mkdir()
    with pytest.raises(DataError, match=r"hf:acme/quiz: acme/quiz is also a folder in the current directory .*; "
                       r"write hf:\./acme/quiz to mean it, or run from another directory$"):
        load_items("hf:acme/quiz", data_dir=tmp_path / "data")
    assert [it["question"] for it in load_items("hf:./acme/quiz", data_dir=tmp_path / "data")] == ["shadow?"]
