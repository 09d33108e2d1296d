"""A JSON input nested deeper than Python's parser goes (a damaged or hostile file, a model's reply) is refused in
one line like any malformed JSON: a RecursionError had escaped every reader as a traceback, and the review page
answered it with a 500."""

from __future__ import annotations

import pytest

from benchfill.cli import main

DEEP = "[" * 100_000 + "]" * 100_000  # past any recursion limit a library sets (pymc raises it to 10,000)


def _one_line(capsys, path) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and str(path) in err, err
    return err


def test_the_cli_refuses_deep_json_in_one_line(tmp_path, capsys):
    responses = tmp_path / "r.jsonl"
    responses.write_text('{"model": "m", "item_id": "a", "correct": 1, "trials": 1, "x": ' + DEEP + "}\n")
    assert main(["diagnose", "--responses", str(responses)]) != 0
    assert "nested too deeply" in _one_line(capsys, responses)
    spec = tmp_path / "s.json"
    spec.write_text(DEEP)
    items = tmp_path / "i.jsonl"
    items.write_text('{"id": "a", "problem": "1+1", "answer": "2"}\n')
    assert main(["run", "--items", str(items), "--spec", str(spec), "--dry-run"]) != 0
    assert "nested too deeply" in _one_line(capsys, spec)
    fit = tmp_path / "f.json"
    fit.write_text(DEEP)
    assert main(["diagnose", "--fit", str(fit)]) != 0
    _one_line(capsys, fit)


def test_library_readers_raise_their_own_error():
    from benchfill.errors import DataError
    from benchfill.prompts import MalformedReply, parse_child

    with pytest.raises(MalformedReply, match="nested too deeply"):  # a rewriter's reply: the child is refused
        parse_child('<child>{"problem": ' + DEEP + ', "answer": "1"}</child>')
    with pytest.raises(MalformedReply, match="nested too deeply"):  # ... and on the trailing-comma retry
        parse_child('<child>{"problem": [1,], "answer": ' + DEEP + '}</child>')
    import tempfile
    from pathlib import Path

    from benchfill.predict.predictor import Predictor

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "p.json"
        p.write_text(DEEP)
        with pytest.raises(DataError, match="nested too deeply"):
            Predictor.load(p)


def test_release_diff_and_the_scale_of_record_refuse_deep_json_in_one_line(tmp_path, capsys):
    from benchfill.errors import DataError
    from benchfill.release import ScaleOfRecord

    for where in ("manifest", "data"):
        a, b = tmp_path / where / "a", tmp_path / where / "b"
        (a / "data").mkdir(parents=True)
        b.mkdir()
        (b / "manifest.json").write_text("{}")
        if where == "manifest":
            (a / "manifest.json").write_text('{"a": ' + DEEP + "}")
        else:
            (a / "manifest.json").write_text("{}")
            (a / "data" / "test.jsonl").write_text(DEEP + "\n")
        assert main(["release", "diff", str(a), str(b)]) != 0
        _one_line(capsys, a)
    (tmp_path / ScaleOfRecord.FILE).write_text('{"b": ' + DEEP + "}")
    with pytest.raises(DataError, match="not a scale of record"):
        ScaleOfRecord.read(tmp_path)
