"""The benchmark registry: specs of the named benchmarks against the real data, and clear errors."""

from __future__ import annotations

import json

import pytest

from benchfill.benchmarks import BenchmarkSpec, custom_benchmark, get_benchmark, known_benchmarks
from benchfill.errors import ConfigError, DataError


@pytest.mark.parametrize("name,n,text", [("aime24", 30, "problem"), ("aime25", 30, "problem"),
                                         ("amc23", 40, "problem"), ("humaneval", 164, "prompt")])
def test_registered_benchmarks_read_the_shared_data(shared_data, name, n, text):
    b = get_benchmark(name, data_dir=shared_data)
    assert len(b.items) == n and b.spec.text_field == text
    assert all(b.spec.answer_field in it for it in b.items)
    assert (b.chance == 0).all()
    assert (b.responses_path is not None) == (name in ("aime25", "humaneval"))


def test_humaneval_spec_names_its_code_fields(shared_data):
    b = get_benchmark("humaneval", data_dir=shared_data)
    it = b.items[0]
    assert b.spec.evaluator == "code" and it[b.spec.tests_field].strip() and it[b.spec.entry_point_field]


def test_mmlu_pro_chance_is_one_over_its_options(shared_data, monkeypatch):
    monkeypatch.setenv("BENCHFILL_DATA_DIR", str(shared_data))
    b = get_benchmark("mmlu-pro")
    assert len(b.items) == 12032 and b.spec.evaluator == "multiple_choice"
    n_opts = [len(it["options"]) for it in b.items[:50]]
    assert list(b.chance[:50]) == [1 / k for k in n_opts]
    assert min(n_opts) < 10 == max(n_opts)  # some items have fewer than ten options


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ConfigError, match="unknown benchmark 'gsm9k'; known: aime24, aime25, amc23, demo"):
        get_benchmark("gsm9k")
    assert "mmlu-pro" in known_benchmarks()


def test_no_data_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCHFILL_DATA_DIR", raising=False)
    with pytest.raises(ConfigError, match=r"--data-dir, or data_dir from Python\) or set BENCHFILL_DATA_DIR.*"
                                          r"HuggingFaceH4/aime_2024"):
        get_benchmark("aime24")
    with pytest.raises(DataError, match=r"aime24/items.jsonl not found"):
        get_benchmark("aime24", data_dir=tmp_path)


def test_custom_benchmark_from_spec_file(tmp_path):
    (tmp_path / "spec.toml").write_text('[benchmark]\nname = "mine"\ntext_field = "q"\nanswer_field = "a"\n'
                                        'evaluator = "multiple_choice"\nchance = 0.25\n')
    (tmp_path / "items.jsonl").write_text(json.dumps({"id": "x", "q": "?", "a": "B", "options": list("ABCD")})
                                          + "\n\n")
    b = custom_benchmark(tmp_path / "items.jsonl", tmp_path / "spec.toml")
    assert b.spec.name == "mine" and b.items[0]["q"] == "?" and list(b.chance) == [0.25]
    (tmp_path / "spec.json").write_text('{"name": "j", "chance": "often"}')
    with pytest.raises(ConfigError, match=r"spec.json: field chance"):
        BenchmarkSpec.from_file(tmp_path / "spec.json")


@pytest.mark.parametrize("line,msg", [
    ('{"id": "x", "q": "?"}', r"items.jsonl:2: item x lacks field 'a'"),
    ('{"id": "", "q": "?", "a": "1"}', r"items.jsonl:2: missing or invalid field 'id'"),
    ('{"id": "a", "q": "?", "a": "1"}', r"items.jsonl:2: duplicate item id 'a'"),
    ("{oops", r"items.jsonl:2: malformed JSON"),
    # graded as the string "None", or shown to the probes as a JSON object: found when the items are read
    ('{"id": "b", "q": "?", "a": null}', r"items.jsonl:2: item b: field 'a' is null \(spec m\)"),
    ('{"id": "b", "q": {"x": 1}, "a": "1"}', r"items.jsonl:2: item b: field 'q' is not text \(a JSON dict\)"),
])
def test_bad_items_name_file_and_line(tmp_path, line, msg):
    (tmp_path / "spec.json").write_text('{"name": "m", "text_field": "q", "answer_field": "a"}')
    (tmp_path / "items.jsonl").write_text('{"id": "a", "q": "?", "a": "1"}\n' + line + "\n")
    with pytest.raises(DataError, match=msg):
        _ = custom_benchmark(tmp_path / "items.jsonl", tmp_path / "spec.json").items


@pytest.mark.parametrize("spec,items_line,msg", [
    # found once the probes' answers came back to be graded, after the benchmark's rollouts (and the run
    # folder they left blocked the corrected command)
    ('{"name": "m", "evaluator": "multiple_choice"}', '{"id": "a", "problem": "?", "answer": "B"}',
     r"items.jsonl:1: item a lacks field 'options' \(spec m\)"),
    ('{"name": "m", "evaluator": "code", "text_field": "prompt"}', '{"id": "a", "prompt": "def f(): pass", "answer": "x"}',
     r"items.jsonl:1: item a lacks field 'test'"),
    ('{"name": "m", "evaluator": "nosuch"}', '{"id": "a", "problem": "?", "answer": "1"}',
     r"spec.json: field evaluator: unknown name 'nosuch'"),
    ('{"name": "m", "solver_prompt": "nosuch"}', '{"id": "a", "problem": "?", "answer": "1"}',
     r"spec.json: field solver_prompt 'nosuch': prompt 'solver_nosuch': no file solver_nosuch.txt"),
    # a traceback from the guessing floor; a name the release refused after the run and its review
    ('{"name": "m", "chance": 1.5}', '{"id": "a", "problem": "?", "answer": "1"}',
     r"spec.json: field chance: a guessing floor in \[0, 1\) or 'options', got 1.5"),
    ('{"name": "My quiz/v2"}', '{"id": "a", "problem": "?", "answer": "1"}',
     r"spec.json: field name: 'My quiz/v2' must be letters, digits"),
    ('{"name": "-x"}', '{"id": "a", "problem": "?", "answer": "1"}',  # letters it has: the start is what is wrong
     r"spec.json: field name: '-x' must be letters, digits, '.', '_' or '-', starting with a letter or digit"),
])
def test_a_spec_no_run_can_use_is_refused_when_read(tmp_path, spec, items_line, msg):
    (tmp_path / "spec.json").write_text(spec)
    (tmp_path / "items.jsonl").write_text(items_line + "\n")
    with pytest.raises((ConfigError, DataError), match=msg):
        _ = custom_benchmark(tmp_path / "items.jsonl", tmp_path / "spec.json").items


def test_the_spec_id_field_names_the_ids_of_a_local_file_too(tmp_path):
    (tmp_path / "spec.json").write_text('{"name": "m", "id_field": "qid"}')
    (tmp_path / "items.jsonl").write_text('{"qid": 7, "problem": "?", "answer": "1"}\n')
    assert [it["id"] for it in custom_benchmark(tmp_path / "items.jsonl", tmp_path / "spec.json").items] == ["7"]
    # rows with an id keep it: a release's rows carry the release's ids, and a child copies its parent's qid
    (tmp_path / "items.jsonl").write_text('{"id": "a", "qid": 7, "problem": "?", "answer": "1"}\n'
                                          '{"id": "a-child", "qid": 7, "problem": "??", "answer": "2"}\n')
    items = custom_benchmark(tmp_path / "items.jsonl", tmp_path / "spec.json").items
    assert [it["id"] for it in items] == ["a", "a-child"]


def test_a_json_spec_with_a_byte_order_mark_is_read_and_one_in_utf16_named(tmp_path):
    # the JSON spec was read by hand: a BOM was "cannot parse spec", UTF-16 a UnicodeDecodeError traceback
    spec = {"name": "mine", "text_field": "q", "answer_field": "a", "evaluator": "math"}
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(spec).encode())
    assert BenchmarkSpec.from_file(tmp_path / "bom.json").name == "mine"
    (tmp_path / "wide.json").write_text(json.dumps(spec), encoding="utf-16")
    with pytest.raises(DataError, match=r"wide\.json: not a UTF-8 text file"):
        BenchmarkSpec.from_file(tmp_path / "wide.json")


@pytest.mark.parametrize(("chance", "said"), [('"0.25"', r"got '0\.25' \(a number is written without quotes\)"),
                                              ("true", "got True$"), ('"option"', "got 'option'$")])
def test_a_spec_chance_that_is_not_a_number_or_options_is_named(tmp_path, chance, said):
    # "0.25" was taken as 0.25, true as 1.0, and "option" named pydantic's union ("field chance.float")
    (tmp_path / "spec.toml").write_text(f'[benchmark]\nname = "mine"\nchance = {chance}\n')
    with pytest.raises(ConfigError, match=r"spec\.toml: field chance: a guessing floor in \[0, 1\) or 'options', "
                                          + said):
        BenchmarkSpec.from_file(tmp_path / "spec.toml")


def test_a_missing_spec_or_one_of_another_format_is_named_as_a_spec(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.toml: spec file not found$"):
        BenchmarkSpec.from_file(tmp_path / "nope.toml")
    (tmp_path / "spec.txt").write_text('name = "x"\n')
    with pytest.raises(ConfigError, match=r"spec\.txt: unknown spec format '\.txt' \(use \.toml, \.yaml, \.yml or \.json\)"):
        BenchmarkSpec.from_file(tmp_path / "spec.txt")


def test_the_fit_and_the_search_take_one_guessing_floor_the_specs(tmp_path):
    # The fit of a responses file took 1 / the options of an "options" or "choices" field whatever the spec
    # said, and the search placed new items by the spec's floor: a multiple-choice spec without `chance` fitted
    # its originals at 1/4 and 1/10 and placed its children at 0 (or, with options_field "opts", the reverse)
    from benchfill.benchmarks import custom_benchmark

    rows, items = ["model,item_id,correct,trials"], []
    for i in range(6):
        items.append(json.dumps({"id": f"q{i}", "question": "?", "opts": list("abcd" if i % 2 else "abcdefghij"),
                                 "choices": list("ab"), "answer": "A"}))
        rows += [f"m{m},q{i},{(i + m) % 2},1" for m in range(3)]
    (tmp_path / "items.jsonl").write_text("\n".join(items) + "\n")
    (tmp_path / "r.csv").write_text("\n".join(rows) + "\n")
    base = ('name = "quiz"\ntext_field = "question"\nanswer_field = "answer"\nevaluator = "multiple_choice"\n'
            'solver_prompt = "multiple_choice"\noptions_field = "opts"\n')
    for extra, floors in (("", [0.25, 0.1]), ('chance = "options"\n', [0.25, 0.1]), ("chance = 0.2\n", [0.2, 0.2])):
        (tmp_path / "spec.toml").write_text(base + extra)
        b = custom_benchmark(tmp_path / "items.jsonl", tmp_path / "spec.toml", tmp_path / "r.csv")
        fitted = dict(zip(b.given_matrix().item_ids, b.given_matrix().chance, strict=True))
        assert [fitted["q1"], fitted["q0"]] == floors and [b.spec.chance_of(json.loads(items[k])) for k in (1, 0)] == floors
