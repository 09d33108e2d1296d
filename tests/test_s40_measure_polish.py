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
