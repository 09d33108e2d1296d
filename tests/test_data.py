"""Reading items and responses: aggregation, ordering, chance, and one clear error per problem."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchfill.data import (
    extreme_items,
    extreme_models,
    item_chance,
    read_items,
    read_responses,
    repeated_note,
    untried_note,
)
from benchfill.errors import DataError


def _write(path, text):
    path.write_text(text)
    return path


def test_csv_repeated_rows_add_up_and_order_of_first_appearance(tmp_path):
    f = _write(tmp_path / "r.csv", "model,item_id,correct,trials\nA,q1,1,2\nB,q1,0,1\nA,q2,3,4\nA,q1,2,2\nB,q2,1,1\n")
    m = read_responses(f)
    assert m.models == ("A", "B") and m.item_ids == ("q1", "q2")
    assert m.correct.tolist() == [[3, 3], [0, 1]]
    assert m.trials.tolist() == [[4, 4], [1, 1]]
    assert m.source == str(f)
    assert np.all(m.chance == 0)


def test_jsonl_responses_and_item_file_order_and_chance(tmp_path):
    items = _write(
        tmp_path / "items.jsonl",
        "\n".join(
            json.dumps(x)
            for x in [
                {"id": "z", "question": "?", "options": ["a", "b", "c", "d"]},
                {"id": 7, "question": "?", "choices": ["a", "b"]},
                {"id": "never", "question": "no responses"},
            ]
        )
        + "\n",
    )
    rows = [
        {"model": "A", "item_id": "7", "correct": 1, "trials": 1},
        {"model": "B", "item_id": "z", "correct": 0, "trials": 1.0},
        {"model": "A", "item_id": "z", "correct": 1, "trials": 1},
    ]
    f = _write(tmp_path / "r.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    m = read_responses(f, items=items)
    assert m.item_ids == ("z", "7")  # item-file order; the unanswered item is left out
    assert m.chance.tolist() == pytest.approx([0.25, 0.5])
    assert m.correct.tolist() == [[1, 1], [0, 0]]
    assert m.trials.tolist() == [[1, 1], [1, 0]]


def test_models_that_solved_all_or_nothing_are_named(tmp_path, capsys):
    # C tried only q1 and solved it: all it tried; D solved nothing; a trial-0 cell counts for nothing
    f = _write(tmp_path / "r.csv", "model,item_id,correct,trials\nA,q1,1,2\nA,q2,0,2\nB,q1,2,2\nB,q2,1,2\n"
                                   "C,q1,2,2\nC,q2,0,0\nD,q1,0,2\nD,q2,0,3\nA,q3,2,2\nB,q3,1,2\nD,q3,0,1\n")
    assert extreme_models(read_responses(f)) == {"all_correct": ["C"], "none_correct": ["D"]}
    from benchfill.cli import main

    assert main(["diagnose", "--responses", str(f), "--k", "2"]) == 0
    out = capsys.readouterr().out
    assert "models that solved every item they tried (1): C; only the prior holds their abilities finite" in out
    assert "models that solved no item (1): D;" in out
    assert main(["fit", "--responses", str(f), "--out", str(tmp_path / "f.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["extreme_models"] == {"all_correct": ["C"], "none_correct": ["D"]}


def test_extreme_items_are_reported(tmp_path):
    f = _write(tmp_path / "r.csv", "model,item_id,correct,trials\nA,e,2,2\nB,e,1,1\nA,h,0,3\nB,h,0,1\nA,m,1,2\nB,m,0,2\n")
    assert extreme_items(read_responses(f)) == {"all_correct": ["e"], "none_correct": ["h"], "no_responses": []}
    items = [{"id": i} for i in ("e", "h", "m", "z")]
    m = read_responses(f, items=items)
    assert m.item_ids == ("e", "h", "m")  # "z" has no responses: not on the scale...
    assert extreme_items(m, items)["no_responses"] == ["z"]  # ...and reported, not hidden


def test_items_with_trials_0_only_are_left_out_and_recorded(tmp_path):
    # "u" has rows, but every one with trials 0: no attempt, so no difficulty; a fit would place it by the
    # prior alone (z 0.911 in the audit's case), in every figure. It is left out and named for the caller.
    f = _write(tmp_path / "r.csv", "model,item_id,correct,trials\nA,q,1,1\nA,u,0,0\nA,p,0,1\n"
                                   "B,q,0,1\nB,u,0,0\nB,p,1,1\n")
    m = read_responses(f)
    assert m.item_ids == ("q", "p") and m.untried == ("u",)
    assert m.trials.tolist() == [[1, 1], [1, 1]] and m.chance.shape == (2,)
    assert extreme_items(m)["no_responses"] == ["u"]
    assert m.with_chance(0.25).untried == ("u",)  # kept through the CLI's --guessing-options
    items = [{"id": i, "options": ["a", "b"]} for i in ("u", "p", "q", "never")]
    m = read_responses(f, items=items)
    assert m.item_ids == ("p", "q") and m.untried == ("u",) and m.chance.tolist() == [0.5, 0.5]
    assert extreme_items(m, items)["no_responses"] == ["u", "never"]  # item-file order, each once
    assert untried_note(m) == f"{f}: 1 item(s) with trials 0 only have no difficulty and are left out: u"
    assert untried_note(read_responses(_write(tmp_path / "ok.csv", "model,item_id,correct,trials\nA,q,1,1\n"
                                                                    "B,q,0,1\n"))) is None


def test_item_chance_free_response_is_zero():
    assert item_chance([{"id": "a", "answer": "3"}, {"id": "b", "options": ["x"] * 10}]) == {"a": 0.0, "b": 0.1}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("model,item_id,correct,trials\nA,q,1,2\nA,q,3,2\n", r"r\.csv:3: correct \(3\) > trials \(2\)"),
        ("model,item_id,correct,trials\nA,q,-1,2\nB,q,0,1\n", r"r\.csv:2: field 'correct' is negative"),
        ("model,item_id,correct,trials\nA,q,1,2.5\nB,q,0,1\n", r"r\.csv:2: field 'trials' must be a non-negative integer"),
        ("model,item_id,correct,trials\nA,q,x,2\n", r"r\.csv:2: field 'correct' must be"),
        # the value said, and why a share or an empty cell is no count
        ("model,item_id,correct,trials\nA,q,0.5,1\n", r"r\.csv:2: field 'correct' must be a non-negative integer, "
         r"got '0\.5' \(a count of answers: partial credit is not read; leave out the row of a pair never tried\)"),
        ("model,item_id,correct,trials\nA,q,,1\n", r"r\.csv:2: field 'correct' .* got ''"),
        # int() reads "1_0" as 10 and other scripts' digits: refused, in the chunk read a column at a time too
        ("model,item_id,correct,trials\nA,q,1,1_0\nB,q,0,1\n", r"r\.csv:2: field 'trials' .* got '1_0'"),
        ("model,item_id,correct,trials\nA,q,1,\uff12\nB,q,0,1\n", r"r\.csv:2: field 'trials' .* got '\\uff12'"),
        ('{"model": "A", "item_id": "q", "correct": "1_0", "trials": 20}\n', r"r\.jsonl:1: field 'correct' .* got '1_0'"),
        ("model,item_id,correct,trials\nA,q,1,2\nA,q,1\n", r"r\.csv:3: malformed line"),
        ("model,item,correct,trials\nA,q,1,2\n", r"r\.csv:1: header lacks column 'item_id'"),
        ("", r"r\.csv: no responses \(empty file\)"),
        ("model,item_id,correct,trials\n", r"r\.csv: no responses \(empty file\)"),
        ("model,item_id,correct,trials\nA,q,1,2\nA,p,0,1\n", r"r\.csv: responses from 1 model"),
        ("model,item_id,correct,trials\n,q,1,2\n", r"r\.csv:2: empty field 'model'"),
        ("model,item_id,correct,trials\nA,q,1,2\nB,\"q,1,2\nB,p,1,1\n",
         r"r\.csv:3: malformed line: 2 fields, header has 4 \(an unclosed quote\?\)"),
        ('model,item_id,correct,trials\n"A\nwith a break",q,1,2\n\nB,q,3,2\n', r"r\.csv:5: correct \(3\) > trials \(2\)"),
    ],
)
def test_bad_csv_gives_one_line_error(tmp_path, text, match):
    f = _write(tmp_path / ("r.jsonl" if text.startswith("{") else "r.csv"), text)
    with pytest.raises(DataError, match=match) as exc:
        read_responses(f)
    assert "\n" not in str(exc.value)


def test_csv_fields_may_hold_quoted_line_breaks_and_blank_lines_are_skipped(tmp_path):
    f = _write(tmp_path / "r.csv", 'model,item_id,correct,trials\n"org/model\nv2",q1,1,2\n\nB,"q,2",0,1\nB,q1,2,2\n'
                                    '"org/model\nv2","q,2",1,1\n')
    m = read_responses(f)
    assert m.models == ("org/model\nv2", "B") and m.item_ids == ("q1", "q,2")
    assert m.correct.tolist() == [[1, 1], [2, 0]] and m.trials.tolist() == [[2, 1], [2, 1]]


def test_a_csv_that_is_not_utf8_gives_one_line_error(tmp_path):
    f = tmp_path / "r.csv"
    f.write_bytes(b"model,item_id,correct,trials\nA,q\xff\xfe,1,2\n")
    with pytest.raises(DataError, match=r"r\.csv: not a UTF-8 text file"):
        read_responses(f)


def test_bad_jsonl_responses(tmp_path):
    f = _write(tmp_path / "r.jsonl", '{"model": "A", "item_id": "q", "correct": 1, "trials": 1}\n{"model": "B",\n')
    with pytest.raises(DataError, match=r"r\.jsonl:2: malformed JSON"):
        read_responses(f)
    f = _write(tmp_path / "r.jsonl", '{"model": "A", "item_id": "q", "correct": 1}\n')
    with pytest.raises(DataError, match=r"r\.jsonl:1: missing field 'trials'"):
        read_responses(f)
    f = _write(tmp_path / "r.jsonl", '{"model": "A", "item_id": "q", "correct": true, "trials": 1}\n')
    with pytest.raises(DataError, match=r"r\.jsonl:1: field 'correct' must be"):
        read_responses(f)


def test_responses_must_name_known_items(tmp_path):
    items = _write(tmp_path / "items.jsonl", '{"id": "q"}\n')
    f = _write(tmp_path / "r.csv", "model,item_id,correct,trials\nA,q,1,1\nB,ghost,0,1\n")
    with pytest.raises(DataError, match=r"r\.csv:3: item 'ghost' is not in the items file"):
        read_responses(f, items=items)


def test_bad_items(tmp_path):
    with pytest.raises(DataError, match=r"i\.jsonl:3: duplicate item id 'a' \(first on line 1\)"):
        read_items(_write(tmp_path / "i.jsonl", '{"id": "a"}\n{"id": "b"}\n{"id": "a"}\n'))
    with pytest.raises(DataError, match=r"i\.jsonl:2: malformed JSON \([^;]*\)$"):  # (no CSV hint)
        read_items(_write(tmp_path / "i.jsonl", '{"id": "a"}\n{"id": \n'))
    # items given as CSV: said (it read "malformed JSON (Expecting value, column 1)" alone)
    with pytest.raises(DataError, match=r"i\.csv:1: malformed JSON \(.*\); this file is read as JSONL \(one JSON "
                                        r"object a line\), not CSV$"):
        read_items(_write(tmp_path / "i.csv", "id,question,answer\nq1,What?,3\n"))
    with pytest.raises(DataError, match=r"i\.jsonl:1: missing or invalid field 'id'"):
        read_items(_write(tmp_path / "i.jsonl", '{"text": "a"}\n'))
    with pytest.raises(DataError, match=r"i\.jsonl: empty items file"):
        read_items(_write(tmp_path / "i.jsonl", "\n"))
    with pytest.raises(DataError, match="file not found"):
        read_items(tmp_path / "missing.jsonl")


def test_every_shared_responses_file_reads(shared_data):
    for f in sorted(shared_data.glob("*/responses.csv")):
        if f.parent.name == "mmlu-pro":
            continue  # large; read once below with its items
        m = read_responses(f)
        assert m.n_models >= 2 and m.n_items >= 15
        assert np.all(m.correct <= m.trials)


def test_aime25_with_items(shared_data):
    m = read_responses(shared_data / "aime25/responses.csv", items=shared_data / "aime25/items.jsonl")
    assert (m.n_models, m.n_items) == (16, 15)
    assert set(np.unique(m.trials)) == {4}


def test_guessing_floor_is_one_rule_for_files_specs_and_the_simulated_world():
    from benchfill.benchmarks import BenchmarkSpec
    from benchfill.data import guessing_floor
    from benchfill.sim.world import World

    items = [{"id": "mc", "question": "q1", "answer": "B", "options": ["a", "b", "c", "d"]},
             {"id": "five", "question": "q2", "answer": "A", "options": list("vwxyz")},
             {"id": "free", "question": "q3", "answer": "B", "options": []}]
    expected = {"mc": 0.25, "five": 0.2, "free": 0.0}
    assert {it["id"]: guessing_floor(it) for it in items} == expected
    assert item_chance(items) == expected
    spec = BenchmarkSpec(name="x", text_field="question", options_field="options", chance="options")
    assert {it["id"]: spec.chance_of(it) for it in items} == expected
    world = World.from_items(items, evaluator="multiple_choice", text_field="question", answer_field="answer")
    assert {i: world.items[k].chance for i, k in world.by_id.items()} == expected
    assert guessing_floor({"choices": ["a", "b"]}) == 0.5 and guessing_floor({"options": "abc"}) == 0.0


def test_an_item_id_with_spaces_around_it_is_the_name_the_responses_give(tmp_path):
    # The responses readers strip names; the items reader did not, so a responses file could never name
    # "a\t" ("item 'a' is not in the items file").
    items = _write(tmp_path / "items.jsonl", '{"id": "a\\t", "problem": "x"}\n{"id": " b ", "problem": "y"}\n')
    got = read_items(items, required=("problem",))
    assert [it["id"] for it in got] == ["a", "b"]
    resp = _write(tmp_path / "r.csv", "model,item_id,correct,trials\nm,a,1,1\nm,b,0,1\nn,a,0,1\nn,b,1,1\n")
    assert read_responses(resp, items=got).item_ids == ("a", "b")
    dup = _write(tmp_path / "dup.jsonl", '{"id": "a", "problem": "x"}\n{"id": "a ", "problem": "y"}\n')
    with pytest.raises(DataError, match=r"dup.jsonl:2: duplicate item id 'a' \(first on line 1\)"):
        read_items(dup, required=("problem",))


def test_jsonl_text_errors_name_the_line_and_what_is_wrong(tmp_path):
    # bytes that are not UTF-8, a raw control character, a lone surrogate escape: each named by line, in
    # one line; a byte-order mark at a line's start (files joined after an editor saved them) is dropped
    from benchfill.data import jsonl_objects

    def read(data: bytes):
        path = tmp_path / "items.jsonl"
        path.write_bytes(data)
        return list(jsonl_objects(path))

    good = b'{"id": "a", "q": "x"}\n'
    with pytest.raises(DataError, match=r"items\.jsonl:2: not UTF-8 text \(byte 9 of the line: b'\\xff'\)"):
        read(good + b'{"id": "\xff"}\n')
    with pytest.raises(DataError, match=r"items\.jsonl:1: not UTF-8 text \(byte 12 of the line: b'\\xff'\)"):
        read(b'\xef\xbb\xbf{"id": "\xff"}\n')  # the line's byte-order mark counted, as it is stored
    with pytest.raises(DataError, match=r"items\.jsonl:2: malformed JSON \(Invalid control character, column 10\)$"):
        read(good + b'{"id": "b\x00"}\n')
    with pytest.raises(DataError, match=r"items\.jsonl:2: field 'meta\.tags\[1\]' holds an unpaired surrogate "
                                        r"\('\\ud800'\), not text"):
        read(good + b'{"id": "b", "meta": {"tags": ["ok", "x\\ud800"]}}\n')
    assert [o["id"] for _, o in read(good + b'\xef\xbb\xbf{"id": "b"}\n')] == ["a", "b"]
    assert [o["id"] for _, o in read(b'{"id": "a"}\r{"id": "b"}\r\n{"id": "c"}\r')] == ["a", "b", "c"]  # old Mac ends
    assert read(b'{"id": "\\ud83d\\ude00"}\n')[0][1]["id"] == "\U0001F600"  # a pair is a character


def test_an_id_in_another_unicode_normal_form_is_named_as_such(tmp_path):
    import unicodedata

    from benchfill.data import read_responses

    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "q-caf\\u00e9", "problem": "?", "answer": "1"}\n', encoding="utf-8")
    nfd = unicodedata.normalize("NFD", "q-caf\u00e9")
    (tmp_path / "r.csv").write_text(f"model,item_id,correct,trials\nm,{nfd},1,2\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"r\.csv:2: item 'q-cafe\u0301' is not in the items file, which has "
                                        r"'q-caf\\xe9': the same letters in another Unicode normal form$"):
        read_responses(tmp_path / "r.csv", items=items)


@pytest.mark.parametrize("suffix, rows, match", [
    # the counts are checked a column at a time; the first line at fault is still the one named
    (".csv", ["A,q1,1,2", "A,q2,x,2", "B,q1,3,2", "B,q2,1"], r"r\.csv:3: field 'correct' must be"),
    (".csv", ["A,q1,1,2", "A,q2,3,2", "B,q9,1,2"], r"r\.csv:3: correct \(3\) > trials \(2\)"),
    (".csv", ["A,q1,1,2", "A,q9,1,2", "B,q1,-1,2"], r"r\.csv:3: item 'q9' is not in the items file"),
    (".csv", ["A,q1,1,2", "B,q1,1,99999999999999999999999"], r"r\.csv:3: field 'trials' is implausibly large"),
    (".csv", ["A,q1,1,2", ",q1,1,2", "B,,1,2"], r"r\.csv:3: empty field 'model'"),
    (".jsonl", [{"model": "A", "item_id": "q1", "correct": 1, "trials": 2},
                {"model": "A", "item_id": "q2", "correct": True, "trials": 2}], r"r\.jsonl:2: field 'correct' must be"),
    # a first count written as text made every count go through int(): 2.9 read as 2, true as 1
    (".jsonl", [{"model": "A", "item_id": "q1", "correct": "1", "trials": 2},
                {"model": "B", "item_id": "q1", "correct": 2.9, "trials": 3.7}], r"r\.jsonl:2: field 'correct' must be"),
    (".jsonl", [{"model": "A", "item_id": "q1", "correct": "1", "trials": 2},
                {"model": "B", "item_id": "q2", "correct": True, "trials": True}], r"r\.jsonl:2: field 'correct' must be"),
    (".jsonl", [{"model": "A", "item_id": "q1", "correct": 1, "trials": 2},
                {"model": "B", "item_id": "q2", "correct": 3, "trials": 2},
                {"model": "B", "item_id": "q1"}], r"r\.jsonl:2: correct \(3\) > trials \(2\)"),
])
def test_the_first_line_at_fault_is_named_when_the_counts_are_read_by_column(tmp_path, suffix, rows, match):
    items = _write(tmp_path / "items.jsonl", "".join(json.dumps({"id": q, "question": q}) + "\n" for q in ("q1", "q2")))
    if suffix == ".csv":
        text = "model,item_id,correct,trials\n" + "".join(r + "\n" for r in rows)
    else:
        text = "".join(json.dumps(r) + "\n" for r in rows)
    f = _write(tmp_path / f"r{suffix}", text)
    with pytest.raises(DataError, match=match):
        read_responses(f, items=items)


def test_a_cell_with_a_separator_beside_its_count_reads_as_before(tmp_path):
    # (strip() takes \x1f away, int() does not: the cells are stripped, as they were)
    f = _write(tmp_path / "r.csv", "model,item_id,correct,trials\nm1,a,1,2\x1f\nm2,a,0,1\n")
    assert read_responses(f).trials.tolist() == [[2], [1]]


def test_a_file_of_many_chunks_reads_whole_and_names_its_first_bad_line(tmp_path, monkeypatch):
    from benchfill import data

    monkeypatch.setattr(data._Columns, "CHUNK", 3)  # rows are taken three at a time
    rows = [f"m{k % 2},q{k % 5},{k % 3},2" for k in range(20)]
    f = _write(tmp_path / "r.csv", "model,item_id,correct,trials\n" + "".join(r + "\n" for r in rows))
    m = read_responses(f)
    assert m.models == ("m0", "m1") and m.item_ids == ("q0", "q1", "q2", "q3", "q4")
    assert m.correct.sum() == sum(k % 3 for k in range(20)) and m.trials.sum() == 40
    rows[7] = "m1,q2,x,2"  # in the third chunk; a malformed line in the fourth
    rows[10] = "m0,q0,1"
    f.write_text("model,item_id,correct,trials\n" + "".join(r + "\n" for r in rows))
    with pytest.raises(DataError, match=r"r\.csv:9: field 'correct' must be") as err:
        read_responses(f)
    assert err.value.__context__ is None  # not shown as raised while handling the later line's error


def test_counts_written_as_whole_floats_read_as_before(tmp_path):
    # '2.0' and 2.0 are counts (a row at a time reads them); the column reading must give the same matrix
    f = _write(tmp_path / "r.csv", "model,item_id,correct,trials\nA,q1, 1 ,2.0\nB,q1,0,1\nA,q2,3,4\n")
    g = _write(tmp_path / "r.jsonl", "".join(json.dumps(r) + "\n" for r in (
        {"model": "A", "item_id": "q1", "correct": 1, "trials": 2.0}, {"model": "B", "item_id": "q1", "correct": 0,
                                                                       "trials": 1},
        {"model": "A", "item_id": "q2", "correct": 3, "trials": 4})))
    for path in (f, g):
        m = read_responses(path)
        assert m.models == ("A", "B") and m.item_ids == ("q1", "q2")
        assert m.correct.tolist() == [[1, 3], [0, 0]] and m.trials.tolist() == [[2, 4], [1, 0]]


def test_rows_repeating_a_pair_add_up_and_are_counted_for_the_reader_to_say(tmp_path):
    rows = "A,q1,1,1\nB,q1,0,1\nA,q2,0,1\nB,q2,1,1\nA,q3,1,1\nB,q3,1,1\n"
    once = read_responses(_write(tmp_path / "once.csv", "model,item_id,correct,trials\n" + rows))
    twice = read_responses(_write(tmp_path / "twice.csv", "model,item_id,correct,trials\n" + rows + rows))
    assert once.repeated == 0 and repeated_note(once) is None
    assert twice.repeated == 6 and (twice.trials == 2 * once.trials).all()
    assert repeated_note(twice) == (f"{tmp_path / 'twice.csv'}: 6 row(s) name a (model, item) pair an earlier row "
                                    "names; their counts are added to it (a row a sample is read so; a file written "
                                    "twice over doubles every count)")


@pytest.mark.parametrize("name", ["r.csv", "r.jsonl", "items.jsonl"])
def test_a_compressed_file_is_named_as_one(tmp_path, name):
    import gzip

    lz4 = tmp_path / "lz4.csv"  # (no lz4 module here: its magic bytes, which are all the reader looks at)
    lz4.write_bytes(b"\x04\x22\x4d\x18" + bytes(range(128, 160)))
    with pytest.raises(DataError, match=r"lz4\.csv: lz4-compressed; benchfill reads the plain file: unlz4 it first"):
        read_responses(lz4)

    path = tmp_path / (name + ".gz")
    body = (b"model,item_id,correct,trials\nA,q,1,1\n" if name.endswith(".csv") else
            b'{"model": "A", "item_id": "q", "correct": 1, "trials": 1, "id": "q"}\n')
    path.write_bytes(gzip.compress(body))
    path = path.rename(tmp_path / name)  # a suffix that says nothing of the compression
    with pytest.raises(DataError, match=rf"{name}: gzip-compressed; benchfill reads the plain file: gunzip it first"):
        read_items(path) if name.startswith("items") else read_responses(path)


def test_a_count_padded_with_a_no_break_space_reads_alike_in_csv_and_jsonl(tmp_path):
    csv_ = read_responses(_write(tmp_path / "r.csv", "model,item_id,correct,trials\nA,q,1\u00a0,2\nB,q,0,1\n"))
    jsonl = read_responses(_write(tmp_path / "r.jsonl", '{"model": "A", "item_id": "q", "correct": "1\\u00a0", '
                                                      '"trials": 2}\n{"model": "B", "item_id": "q", "correct": 0, '
                                                      '"trials": 1}\n'))
    assert csv_.correct.tolist() == jsonl.correct.tolist() == [[1], [0]]
