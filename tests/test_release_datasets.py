"""Releases as datasets: a large one loads, each column holds one type, a release can be gap-filled again,
and two releases into one benchmark folder take turns."""

from __future__ import annotations

import json
import threading
import time

import pytest
from test_review_support import CHILD_IDS, make_run, record_fit

from benchfill import locks
from benchfill.errors import BenchfillError, DataError
from benchfill.release import _typed_like, release
from benchfill.review import ReviewBoard
from benchfill.run import RunOptions, run

# plumbing: probes that answer independently about the curve, so that a short run through a few of them
# chooses a child (the default world's offsets are run by test_report_claims.py and test_readme_demo.py)
FAST = dict(gaps=1, rounds=1, parents=2, children=2, references=8, sim_probes=6, progress=False, sim_rewriter="kind",
            sim_pair_sd=0.0)


def _data(root, shared_data, *, text_chars: int = 0, int_answers: bool = False):
    """aime24's items laid out as ../shared/data lays them out, each text padded to ``text_chars``
    characters, or each answer an integer."""
    items = [json.loads(x) for x in (shared_data / "aime24" / "items.jsonl").read_text().splitlines() if x.strip()]
    for it in items:
        if text_chars:
            it["problem"] = (it["problem"] + " ") * (text_chars // (len(it["problem"]) + 1) + 1)
        if int_answers:
            it["answer"] = int(it["answer"])
    (root / "aime24").mkdir(parents=True)
    (root / "aime24" / "items.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    return root


def _accept_all(run_dir):
    with ReviewBoard(run_dir) as board:
        for e in board.entries:
            board.decide(e.item_id, "ann", "accept")


def _rows(release_dir):
    return [json.loads(x) for x in (release_dir / "data" / "test.jsonl").read_text().splitlines()]


def test_a_release_of_more_than_ten_megabytes_loads_with_datasets(tmp_path, shared_data):
    """`datasets` takes a JSON file's types from its first 10 MB unless the card declares them: there,
    every provenance column of the original items is null, and the generated rows that follow failed."""
    import datasets

    run_dir = make_run(tmp_path, _data(tmp_path / "data", shared_data, text_chars=400_000))
    _accept_all(run_dir)
    res = release(run_dir, "1.0.0")
    assert (res.path / "data" / "test.jsonl").stat().st_size > 11 << 20
    ds = datasets.load_dataset(str(res.path), split="test")
    assert ds.num_rows == 34
    gen = [r for r in ds if r["origin"] == "generated"]
    assert sorted(r["id"] for r in gen) == sorted(CHILD_IDS)
    assert all(r["ancestor_id"] and isinstance(r["gap_index"], int) and r["gap_left"] < r["gap_right"] for r in gen)
    assert ds.features["ancestor_id"].dtype == "string" and ds.features["simulated"].dtype == "bool"


def test_a_generated_items_fields_take_their_ancestors_json_types(tmp_path, shared_data):
    """Integer answers in the items: the children's answers ("205", and a reviewer's edit "12") are
    released as integers, so the column holds one type and `datasets` reads it as int64."""
    import datasets

    run_dir = make_run(tmp_path, _data(tmp_path / "data", shared_data, int_answers=True))
    with ReviewBoard(run_dir) as board:
        board.decide(CHILD_IDS[0], "ann", "accept")
        board.decide(CHILD_IDS[2], "bob", "edit", text="Edited: find x.", answer="12")
    res = release(run_dir, "1.0.0")
    rows = _rows(res.path)
    assert all(type(r["answer"]) is int for r in rows)
    assert next(r for r in rows if r["id"] == CHILD_IDS[2])["answer"] == 12
    assert json.loads(next(r for r in rows if r["id"] == CHILD_IDS[2])["original_fields"])["answer"].isdigit()
    ds = datasets.load_dataset(str(res.path), split="test")
    assert ds.features["answer"].dtype == "int64" and ds.num_rows == 32


def test_card_features_are_the_types_arrow_infers_from_all_the_rows():
    import datasets
    import pyarrow as pa

    from benchfill.review.card import card_features

    rows = [{"id": "a", "n": 1, "x": 0.5, "opts": ["p", "q"], "tests": [{"in": "1", "out": 2}], "none": None,
             "meta": {"k": "v", "deep": {"z": [1, 2]}}, "nested": [[1], [2, 3]], "empty": [], "flag": True},
            {"id": "b", "n": None, "x": 2, "opts": [], "tests": [{"in": "3", "out": None, "extra": 1.5}], "none": None,
             "meta": {"k": None, "deep": {"z": []}, "more": "m"}, "nested": [], "empty": [], "flag": False}]  # fmt: skip
    ours = datasets.Features._from_yaml_list(card_features(rows))
    assert ours == datasets.Features.from_arrow_schema(pa.Table.from_pylist(rows).schema)
    assert card_features([{"answer": 1}, {"answer": "5/2"}]) is None  # no one type: no features, as before


def test_the_card_says_which_columns_mix_types_and_how_to_read_them(tmp_path, shared_data):
    # the card declares no types then, and a release over 10 MB failed to load at the first row of the other
    from test_review_support import CHILD_IDS, make_run

    from benchfill.release import release
    from benchfill.review import ReviewBoard
    from benchfill.review.card import mixed_columns

    assert mixed_columns([{"id": "a", "answer": 12, "n": 1}, {"id": "b", "answer": "2/3", "n": 2}]) == ["answer"]
    from benchfill.schema import Item
    from benchfill.store import Store

    run = make_run(tmp_path, shared_data)
    store = Store(run / "store.db")  # the originals' answers as numbers, as amc23's are
    with store.session() as s:
        for it in s.exec(store.select(Item, Item.origin == "original")):
            data = json.loads(it.data_json)
            it.data_json = json.dumps({**data, "answer": int(data["answer"])})
            s.add(it)
    store.close()
    with ReviewBoard(run) as b:
        b.decide(CHILD_IDS[0], "ann", "edit", answer="two thirds")  # text no number column can hold
        b.decide(CHILD_IDS[1], "ann", "accept")
    card = (release(run, "1.0.0").path / "README.md").read_text()
    assert "> Column(s) `answer` hold values no one type holds" in card and "dataset_info" not in card
    assert "pandas.read_json(path, lines=True, dtype=False)" in card
    clean = make_run(tmp_path / "clean", shared_data)
    with ReviewBoard(clean) as b:
        b.decide(CHILD_IDS[1], "ann", "accept")
    card = (release(clean, "1.0.0", out=tmp_path / "clean" / "rel").path / "README.md").read_text()
    assert "no one type holds" not in card and "dataset_info" in card


@pytest.mark.parametrize(
    ("value", "model", "typed"),
    [("518", 7, 518), ("-3", 7, -3), (518.0, 7, 518), ("018", 7, "018"), ("5/2", 7, "5/2"), ("1e3", 7, "1e3"),
     ("0.25", 0.5, 0.25), ("NaN", 0.5, "NaN"), (518, "7", "518"), (True, "7", True), ("1", True, "1"),
     (["1", "x"], [2], [1, "x"]), ({"a": "3", "b": "4"}, {"a": 1}, {"a": 3, "b": "4"}), (None, 1, None)],
)
def test_a_field_takes_its_ancestors_type_only_where_the_conversion_is_exact(value, model, typed):
    assert _typed_like(value, model) == typed and type(_typed_like(value, model)) is type(typed)


def test_a_release_gap_filled_again_is_released_as_a_benchmark_of_its_own(tmp_path, shared_data):
    """A release's data file as a new run's items: the earlier release's provenance columns are not item
    fields (the rewriter never reads them), and the new run's release does not meet them as a clash."""
    import datasets

    from benchfill.benchmarks import RELEASE_COLUMNS, custom_benchmark

    first = make_run(tmp_path, shared_data)
    _accept_all(first)
    v1 = release(first, "1.0.0").path
    spec = tmp_path / "spec.toml"
    spec.write_text('[benchmark]\nname = "aime24-filled"\ntext_field = "problem"\nanswer_field = "answer"\n')
    items = custom_benchmark(v1 / "data" / "test.jsonl", spec).items
    assert len(items) == 34 and not any(set(it) & set(RELEASE_COLUMNS) for it in items)
    by_id = {r["id"]: r for r in _rows(v1)}
    assert all(it == {k: v for k, v in by_id[it["id"]].items() if k not in RELEASE_COLUMNS} for it in items)

    opts = RunOptions(benchmark=None, items=str(v1 / "data" / "test.jsonl"), spec=str(spec), backend="sim",
                      runs_dir=str(tmp_path / "runs"), **{**FAST, "rounds": 2})  # fmt: skip
    second = run(opts)
    _accept_all(second)
    res = release(second, "1.0.0")
    assert res.path == tmp_path / "runs" / "releases" / "aime24-filled" / "1.0.0" and res.n_original == 34
    rows = _rows(res.path)
    assert all(r["released_in"] == "1.0.0" and r["run_id"] == second.name for r in rows if r["origin"] == "original")
    assert {r["id"] for r in rows if r["origin"] == "original"} == set(by_id)
    gen = [r for r in rows if r["origin"] == "generated"]
    assert gen and all(r["ancestor_id"] in by_id for r in gen)
    assert datasets.load_dataset(str(res.path), split="test").num_rows == len(rows)


def test_a_release_made_by_benchfill_ids_gap_filled_again_keeps_every_item(tmp_path, shared_data):
    """A release's generated items carry the ids a run gives its children (bf-g0-r1-p0-c0): a new run on
    that data named its own children alike, and each took the place of the original of its id in the store,
    so the release of it held 30 of its 32 items. Released again under the first benchmark's name, the
    generated items came back as originals, with no reviews, and moved the "before" figures."""
    from benchfill.schema import Item
    from benchfill.store import open_run_store

    first = make_run(tmp_path, shared_data)
    _accept_all(first)
    v1 = release(first, "1.0.0").path
    rows = [json.loads(x) for x in (v1 / "data" / "test.jsonl").read_text().splitlines()]
    names = iter(f"bf-g0-r1-p{p}-c{c}" for p in range(2) for c in range(2))
    for r in rows:
        if r["origin"] == "generated":
            r["id"] = next(names)
    data = tmp_path / "filled.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("aime24-filled", "aime24"):
        spec = tmp_path / f"{name}.toml"
        spec.write_text(f'[benchmark]\nname = "{name}"\ntext_field = "problem"\nanswer_field = "answer"\n')
        given = data if name == "aime24-filled" else v1 / "data" / "test.jsonl"  # the release's own ids
        opts = RunOptions(benchmark=None, items=str(given), spec=str(spec), backend="sim",
                          runs_dir=str(tmp_path / f"runs-{name}"), **{**FAST, "rounds": 2})  # fmt: skip
        second = run(opts)
        store = open_run_store(second, create=False)
        with store.session() as s:
            items = list(s.exec(store.select(Item)))
        store.close()
        assert len([i for i in items if i.origin == "original"]) == 34
        if name == "aime24-filled":
            assert {i.id for i in items if i.origin == "original"} == {r["id"] for r in rows}
            assert any(i.origin == "generated" and i.id.endswith("-new") for i in items)
        _accept_all(second)
        if name == "aime24-filled":
            assert release(second, "1.0.0").n_original == 34
        else:  # into the first benchmark's own folder, beside 1.0.0
            with pytest.raises(BenchfillError, match=r"4 of its benchmark's items are generated items of release "
                                                     r"1\.0\.0 of aime24 \(.*\): a benchmark made from a release is "
                                                     r"another benchmark"):
                release(second, "1.1.0", out=tmp_path / "releases")


def test_an_item_field_named_like_a_release_column_ships_as_item_name_and_comes_back_as_items(tmp_path):
    """LiveCodeBench's items carry "difficulty" (easy, medium, hard): the run goes ahead, the release ships
    the field as "item_difficulty" beside its own measured "difficulty", and the release read back as a
    new run's items gives the field its name again."""
    from benchfill.benchmarks import custom_benchmark

    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"q{i}", "problem": f"What is {i} + {i + 3}?", "answer": str(2 * i + 3),
                                         "difficulty": "easy" if i < 6 else "hard"}) + "\n" for i in range(12)))  # fmt: skip
    spec = tmp_path / "spec.toml"
    spec.write_text('[benchmark]\nname = "mine"\n')
    opts = RunOptions(benchmark=None, items=str(items), spec=str(spec), runs_dir=str(tmp_path / "runs"), **FAST)
    run_dir = run(opts)
    _accept_all(run_dir)
    rel = release(run_dir, "1.0.0").path
    rows = _rows(rel)
    originals = [r for r in rows if r["origin"] == "original"]
    assert {r["item_difficulty"] for r in originals} == {"easy", "hard"}
    assert all(isinstance(r["difficulty"], float) for r in originals)  # the measured one, on the scale of record
    back = custom_benchmark(rel / "data" / "test.jsonl", spec).items
    want = {json.loads(x)["id"]: json.loads(x) for x in items.read_text().splitlines()}
    assert {it["id"]: it for it in back if it["id"] in want} == want

def test_a_second_release_into_the_benchmark_folder_waits_for_the_first(tmp_path, shared_data):
    """While a release holds the benchmark folder, another waits: it then sees what the first published
    (here 2.0.0, so 1.0.0 is no longer newer), instead of checking the versions before the first is done."""
    run_dir = make_run(tmp_path, shared_data)
    _accept_all(run_dir)
    bench_dir = tmp_path / "releases" / "aime24"
    bench_dir.mkdir(parents=True)
    held = locks.hold(bench_dir)  # a release in progress
    outcome: dict[str, object] = {}

    def second():
        try:
            outcome["result"] = release(run_dir, "1.0.0")
        except BenchfillError as exc:
            outcome["error"] = exc

    waiter = threading.Thread(target=second)
    try:
        waiter.start()
        time.sleep(1.0)
        assert waiter.is_alive() and not (bench_dir / "1.0.0").exists()
        (bench_dir / "2.0.0").mkdir()  # what the release in progress publishes
        (bench_dir / "2.0.0" / "manifest.json").write_text("{}")
    finally:
        locks.release(held)
        waiter.join(60)
    assert "result" not in outcome and "not newer than the latest release 2.0.0" in str(outcome["error"])
    assert sorted(p.name for p in bench_dir.iterdir()) == ["2.0.0"]


def test_a_refused_first_release_leaves_no_folder(tmp_path, shared_data):
    run_dir = make_run(tmp_path, shared_data)
    record_fit(run_dir, None)
    with pytest.raises(DataError, match="no IRT fit"):
        release(run_dir, "1.0.0")
    assert not (tmp_path / "releases").exists()


def test_a_key_index_follows_the_generated_items_own_key():
    # mmlu-pro's generated rows shipped answer_index null (the card declares int64), and a rewriter that
    # copied its parent's index with the options reshuffled would ship the old option's index
    from benchfill.release import _key_index

    ancestor = {"question": "q", "options": list("abcdefghij"), "answer": "D", "answer_index": 3, "year": 3,
                "label_idx": 4}  # fmt: skip
    child = {"question": "q'", "options": list("jihgfedcba"), "answer": "G"}
    got = _key_index(child, ancestor, "answer")
    assert got["answer_index"] == 6 and got["label_idx"] == 7  # counted from 0, and from 1
    assert "year" not in got and child.get("answer_index") is None  # an int that is no index; the input kept
    stale = _key_index({**child, "answer_index": 3}, ancestor, "answer")
    assert stale["answer_index"] == 6
    assert _key_index({**child, "answer": "42"}, ancestor, "answer") == {**child, "answer": "42"}  # no letter
    assert _key_index(child, {**ancestor, "answer": "x"}, "answer") == child
    # a key written as the grader reads it, "(G)" or " g ", or as the index 6, sets it too (it kept the stale 3)
    for key in ("(G)", " g ", 6):
        got = _key_index({**child, "answer": key, "answer_index": 3}, ancestor, "answer")
        assert got["answer_index"] == 6 and got["answer"] == "G"  # in the benchmark's own form
