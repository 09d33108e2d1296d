"""lm-eval-harness logs as lm-eval writes them in the cases the committed fixture does not show: several
filters, lm-eval 0.4.3-0.4.6, chat templates, killed runs, multiple choice with repeats, ``--output_path
NAME.json``, odd doc ids, and logs reached twice or through symlinks.

Each log is made here from the committed one (tests/fixtures/lm_eval, written by the real lm-eval 0.4.13),
changed as the lm-eval source writes that case; everything is written under tmp_path.
"""

from __future__ import annotations

import copy
import csv
import json
import shutil
from pathlib import Path

import pytest

from benchfill.cli import main
from benchfill.importers import import_logs, lm_eval

LOGS = Path(__file__).resolve().parent / "fixtures" / "lm_eval" / "logs"
RESULTS = json.loads(next((LOGS / "a").rglob("results_*.json")).read_text())
TIME = "2025-01-01T00-00-00.000000"


def _rows(out: Path) -> dict[tuple[str, str], tuple[int, int]]:
    with (out / "responses.csv").open() as fh:
        return {(r["model"], r["item_id"]): (int(r["correct"]), int(r["trials"])) for r in csv.DictReader(fh)}


def _copy(run: str, dest: Path) -> Path:
    """A copy of a committed run's output folder (OUT/<model>/...)."""
    shutil.copytree(LOGS / run, dest)
    return dest


def _edit(path: Path, edit) -> None:
    """Rewrite a samples file (edit each sample) or a results file (edit the object)."""
    if path.suffix == ".jsonl":
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(edit(r) or r, ensure_ascii=False) + "\n" for r in rows))
    else:
        path.write_text(json.dumps(edit(json.loads(path.read_text()))))


def _sample(doc_id, question: str, answer: str, value: float, filt: str = "none") -> dict:
    """A generate_until sample as lm-eval >= 0.4.7 logs it (arguments keyed as its tracker writes them)."""
    s = {"doc_id": doc_id, "doc": {"question": question, "answer": answer}, "target": answer,
         "arguments": {"gen_args_0": {"arg_0": f"Question: {question}\nAnswer:", "arg_1": {"until": ["\n"]}}},
         "resps": [["x"]], "filtered_resps": ["x"], "filter": filt, "metrics": ["exact_match"]}  # fmt: skip
    return {**s, "exact_match": value}


def _run(folder: Path, model: str, task: str, samples: list[dict], filters=("none",)) -> Path:
    """OUT/<model>/results_<time>.json and samples_<task>_<time>.jsonl, lm-eval's layout; n-samples counts
    documents (not lines: a task with two filters logs each document twice)."""
    res = copy.deepcopy(RESULTS)
    cfg = {**copy.deepcopy(res["configs"]["tiny_qa"]), "task": task, "repeats": 1,
           "filter_list": [{"name": f, "filter": [{"function": "take_first"}]} for f in filters]}  # fmt: skip
    n = len({s["doc_id"] for s in samples})
    res.update({"model_name": model, "configs": {task: cfg}, "n-samples": {task: {"original": n, "effective": n}}})
    d = folder / model
    d.mkdir(parents=True)
    (d / f"results_{TIME}.json").write_text(json.dumps(res))
    (d / f"samples_{task}_{TIME}.jsonl").write_text("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in samples))
    return d


def _gsm8k(folder: Path) -> Path:
    """gsm8k's two filters: lm-eval logs every document once per filter, filter after filter."""
    lines = [_sample(i, f"q{i}", str(i), v, filt) for filt, vals in (("strict-match", [0.0, 1.0, 0.0]),
             ("flexible-extract", [1.0, 1.0, 0.0])) for i, v in enumerate(vals)]  # fmt: skip
    return _run(folder, "org/model-a", "gsm8k", lines, filters=("strict-match", "flexible-extract"))


def _fails(args: list[str], capsys) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


# 1 -----------------------------------------------------------------------------------------------------


def test_a_task_logged_under_two_filters_is_imported_under_the_one_chosen(tmp_path, capsys):
    _gsm8k(tmp_path / "lm_eval_out")
    out = tmp_path / "imported"
    args = ["import", "lm-eval", str(tmp_path / "lm_eval_out"), "--task", "gsm8k", "--out", str(out)]
    err = _fails(args, capsys)
    assert "samples_gsm8k_" in err and "2 filters ('strict-match', 'flexible-extract'); choose one with --filter NAME" in err
    assert not out.exists()
    assert "no filter 'strict' (the log has 'strict-match', 'flexible-extract')" in _fails([*args, "--filter", "strict"], capsys)
    for filt, expected in (("strict-match", [0, 1, 0]), ("flexible-extract", [1, 1, 0])):
        assert main([*args, "--filter", filt]) == 0
        assert _rows(out) == {("org/model-a", f"gsm8k/{i}"): (v, 1) for i, v in enumerate(expected)}
        assert json.loads((out / "import.json").read_text())["metric"] == f"exact_match,{filt}"
    assert "names a filter already" in _fails([*args, "--metric", "exact_match,strict-match", "--filter", "x"], capsys)
    assert "only lm-eval logs have filters" in _fails(["import", "inspect", str(tmp_path), "--filter", "x", "--out", str(out)], capsys)
    # lm-eval's own notation, METRIC,FILTER, says the same
    res = import_logs("lm-eval", [tmp_path / "lm_eval_out"], metric="exact_match,flexible-extract")
    assert res.metric == "exact_match,flexible-extract" and res.correct[("org/model-a", "gsm8k/0")] == 1


# 2 -----------------------------------------------------------------------------------------------------


def _drop_keys(sample: dict) -> None:
    """lm-eval 0.4.3-0.4.6 wrote no "metrics" and no "filter" (lm_eval/evaluator.py, v0.4.6 vs v0.4.7)."""
    del sample["metrics"], sample["filter"]


def test_logs_of_lm_eval_0_4_3_to_0_4_6_are_read(tmp_path, capsys):
    old = _copy("a", tmp_path / "old")
    for p in old.rglob("samples_*.jsonl"):
        _edit(p, _drop_keys)
    for task in ("tiny_mc", "tiny_qa"):  # tiny_qa: repeats 4 under its one filter, "all"
        new, got = import_logs("lm-eval", [LOGS / "a"], task=task), import_logs("lm-eval", [old], task=task)
        assert (got.metric, got.correct, got.trials) == (new.metric, new.correct, new.trials)
    assert import_logs("lm-eval", [old], task="tiny_qa", metric="overlap", threshold=0.5).metric == "overlap"
    # of several filters, the lines of one cannot be told from the other's: refused, naming the version
    _gsm8k(tmp_path / "two")
    _edit(next((tmp_path / "two").rglob("samples_*.jsonl")), _drop_keys)
    err = _fails(["import", "lm-eval", str(tmp_path / "two"), "--filter", "strict-match", "--out", str(tmp_path / "o")], capsys)
    assert "samples_gsm8k_" in err and "lm-eval before 0.4.7" in err and "(strict-match, flexible-extract)" in err


# 3 -----------------------------------------------------------------------------------------------------

TEMPLATES = {"a": "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
             "b": "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"}  # fmt: skip


def _chat(run: str, dest: Path) -> Path:
    """A run with --apply_chat_template: the results file holds the model's template, each prompt is rendered
    with it, and a multiple-choice continuation loses its target delimiter (lm_eval/api/task.py)."""
    root = _copy(run, dest)
    _edit(next(root.rglob("results_*.json")), lambda r: {**r, "chat_template": TEMPLATES[run], "chat_template_sha": "x"})

    def render(s: dict) -> None:
        for a in s["arguments"].values():
            a["arg_0"], a["arg_1"] = TEMPLATES[run].format(a["arg_0"]), a["arg_1"].lstrip()

    _edit(next(root.rglob("samples_tiny_mc_*.jsonl")), render)
    return root


def test_models_with_their_own_chat_templates_share_items(tmp_path, capsys):
    a, b = _chat("a", tmp_path / "a"), _chat("b", tmp_path / "b")
    out = tmp_path / "out"
    assert main(["import", "lm-eval", str(a), str(b), "--task", "tiny_mc", "--out", str(out)]) == 0
    rows = _rows(out)
    assert len(rows) == 12 and {m for m, _ in rows} == {"dummy-a", "dummy-b"}
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert items[1]["choices"] == ["lol", "4", "Paris", "blue"] and "What is 2 + 2?" in items[1]["text"]
    assert "identity" not in items[1] and items[1]["doc"]["question"] == "What is 2 + 2?"
    # base models run plain and instruct models with their template share items too
    plain = _copy("a", tmp_path / "plain")
    assert main(["import", "lm-eval", str(plain), str(b), "--task", "tiny_mc", "--out", str(tmp_path / "o1")]) == 0
    assert len(_rows(tmp_path / "o1")) == 12
    # another document under the same id is still refused
    _edit(next(b.rglob("samples_tiny_mc_*.jsonl")), lambda s: s["doc"].update(question="What is 3 + 3?"))
    err = _fails(["import", "lm-eval", str(a), str(b), "--task", "tiny_mc", "--out", str(tmp_path / "o2")], capsys)
    assert "reads differently" in err


# 4 -----------------------------------------------------------------------------------------------------


def test_a_log_a_killed_run_cut_at_a_line_is_refused(tmp_path, capsys):
    root = _copy("b", tmp_path / "b")
    sample = next(root.rglob("samples_tiny_mc_*.jsonl"))
    sample.write_text("".join(sample.read_text().splitlines(keepends=True)[:5]))  # 5 of 6 documents
    out = tmp_path / "out"
    err = _fails(["import", "lm-eval", str(root), "--task", "tiny_mc", "--out", str(out)], capsys)
    assert str(sample) in err and "5 document(s)" in err and "counts 6 (n-samples.effective)" in err
    assert not out.exists()
    # --limit 4 writes n-samples.effective 4: that run is whole
    assert len(import_logs("lm-eval", [LOGS / "c"], task="tiny_mc").item_ids) == 4


# 5 -----------------------------------------------------------------------------------------------------


def test_multiple_choice_with_repeats_is_one_trial_per_document(tmp_path):
    root = _copy("a", tmp_path / "a")
    _edit(next(root.rglob("results_*.json")), lambda r: r["configs"]["tiny_mc"].update(repeats=2) or r)
    res = import_logs("lm-eval", [root], task="tiny_mc")
    acc = {s["doc_id"]: s["acc"] for s in map(json.loads, next(root.rglob("samples_tiny_mc_*")).read_text().splitlines())}
    assert {i: (res.correct[("dummy-a", f"tiny_mc/{i}")], res.trials[("dummy-a", f"tiny_mc/{i}")]) for i in acc} == \
        {i: (int(v), 1) for i, v in acc.items()}  # fmt: skip
    assert res.sources[0]["scoring"] == "acc: one scored response per document (of 2 repeats)"


# 6 -----------------------------------------------------------------------------------------------------


def test_the_results_file_of_output_path_name_json_is_found(tmp_path):
    # lm-eval >= 0.4.9 given --output_path out/run.json: out/run_<time>.json, the samples beside it
    out = shutil.copytree(LOGS / "a" / "dummy-a", tmp_path / "out")
    results = next(out.glob("results_*.json"))
    results.rename(results.with_name(results.name.replace("results_", "run_")))
    res = import_logs("lm-eval", [out], task="tiny_mc")
    assert res.models == ["dummy-a"] and len(res.item_ids) == 6


# 7 -----------------------------------------------------------------------------------------------------


def test_a_doc_id_of_a_unicode_digit_is_one_line(tmp_path, capsys):
    d = _run(tmp_path / "sup", "m", "arith", [_sample("²", "q", "1", 1.0)])  # "²".isdigit(), but int("²") fails
    err = _fails(["import", "lm-eval", str(d), "--out", str(tmp_path / "o")], capsys)
    assert "samples_arith_" in err and "line 1: field 'doc_id' must be an integer, found \"²\"" in err
    s = _sample(0, "q", "1", 1.0)
    s["arguments"]["gen_args_²"] = s["arguments"]["gen_args_0"]
    d = _run(tmp_path / "args", "m", "arith", [s])
    assert import_logs("lm-eval", [d]).item_ids == ["arith/0"]


# 8 -----------------------------------------------------------------------------------------------------


def test_a_log_reached_twice_is_one_run(tmp_path):
    a = _copy("a", tmp_path / "a")
    (tmp_path / "a_link").symlink_to(a)
    sample = next(a.rglob("samples_tiny_mc_*.jsonl"))
    for paths in ([a, a], [a, tmp_path / "a_link"], [tmp_path], [sample, tmp_path / "a_link"]):
        files = lm_eval.find_logs(paths)  # each file read once
        assert len(files) == 2 and len({f.resolve() for f in files}) == 2, paths
        res = import_logs("lm-eval", paths, task="tiny_mc", sum_repeats=True)
        assert set(res.trials.values()) == {1} and res.summed == [] and len(res.sources) == 1, paths


def test_symlinked_model_folders_are_followed_once(tmp_path):
    logs = tmp_path / "logs"
    _copy("a", logs)
    (logs / "dummy-b").symlink_to(LOGS / "b" / "dummy-b", target_is_directory=True)  # kept elsewhere
    (logs / "dummy-a" / "loop").symlink_to(logs, target_is_directory=True)  # a link to an ancestor
    res = import_logs("lm-eval", [logs], task="tiny_mc")
    assert res.models == ["dummy-a", "dummy-b"] and len(res.sources) == 2


# multiple choice, into a run ---------------------------------------------------------------------------


def test_a_multiple_choice_import_runs_with_the_multiple_choice_grader(tmp_path, capsys):
    # lm-eval logs the answer's index as a string ("0"), which the grader took for a letter and refused:
    # items.jsonl gives each multiple-choice item its option letter as "answer"
    out = tmp_path / "mc"
    assert main(["import", "lm-eval", str(LOGS / "a"), str(LOGS / "b"), "--task", "tiny_mc", "--out", str(out)]) == 0
    items = [json.loads(ln) for ln in (out / "items.jsonl").read_text().splitlines()]
    assert items and all(it["answer"] == "ABCD"[int(it["target"])] for it in items)
    assert all(it["choices"][int(it["target"])] == it["doc"]["answer"] for it in items)
    spec = tmp_path / "spec.toml"
    spec.write_text('[benchmark]\nname = "tiny-mc"\ntext_field = "text"\nanswer_field = "answer"\n'
                    'options_field = "choices"\nevaluator = "multiple_choice"\nsolver_prompt = "multiple_choice"\n'
                    'chance = "options"\n')
    capsys.readouterr()
    rc = main(["run", "--items", str(out / "items.jsonl"), "--spec", str(spec), "--responses",
               str(out / "responses.csv"), "--backend", "sim", "--gaps", "1", "--rounds", "1", "--parents", "1",
               "--children", "2", "--quiet", "--runs-dir", str(tmp_path / "runs"), "--run-id", "mc"])
    assert rc == 0, capsys.readouterr().err
    assert (tmp_path / "runs" / "mc" / "report.json").exists()


def test_the_answer_letter_reads_an_index_a_letter_or_the_options_text():
    choices = ["lol", "4", "Paris", "blue"]
    got = [lm_eval._answer_letter(t, choices) for t in ("0", 3, " 2", "B", "Paris", "4", "9", "E", "x", None, True)]
    # "4" is an index out of range before it is an option's text: an index is what lm-eval logs for choices
    assert got == ["A", "D", "C", "B", "C", None, None, None, None, None, None]


# models that would drop out or merge, and pass@k --------------------------------------------------------


def test_a_gzipped_samples_file_is_read_and_a_results_file_without_samples_is_refused(tmp_path, capsys):
    import gzip

    mix = tmp_path / "mix"
    _copy("a", mix / "a")
    _copy("b", mix / "b")
    for p in (mix / "b").rglob("samples_*.jsonl"):  # gzipped: read as it is
        p.with_name(p.name + ".gz").write_bytes(gzip.compress(p.read_bytes()))
        p.unlink()
    plain = import_logs("lm-eval", [LOGS / "a", LOGS / "b"], task="tiny_mc")
    zipped = import_logs("lm-eval", [mix], task="tiny_mc")
    assert (zipped.models, zipped.correct, zipped.trials) == (plain.models, plain.correct, plain.trials)
    # a run made without --log_samples: its model had dropped out of the matrix without a word
    alone = mix / "c"
    alone.mkdir()
    shutil.copy(next((LOGS / "c").rglob("results_*.json")), alone)
    err = _fails(["import", "lm-eval", str(mix), "--task", "tiny_mc", "--out", str(tmp_path / "out")], capsys)
    assert str(alone) in err and "no samples_<task>_" in err and "without lm_eval --log_samples" in err
    assert not (tmp_path / "out").exists()
    # a gzipped log cut short is named
    (alone / next(alone.iterdir()).name).unlink()
    cut = next((mix / "b").rglob("samples_tiny_mc_*.jsonl.gz"))
    cut.write_bytes(cut.read_bytes()[:-40])
    err = _fails(["import", "lm-eval", str(mix), "--task", "tiny_mc", "--out", str(tmp_path / "out")], capsys)
    assert f"{cut}: not a readable gzip file" in err


def test_two_checkpoints_under_one_name_are_refused_even_with_sum(tmp_path, capsys):
    # lm-eval's model_name keeps only pretrained=: another revision of the model has the same name
    two = _copy("a-again", tmp_path / "step2000")
    _edit(next(two.rglob("results_*.json")),
          lambda r: r["config"]["model_args"].update(revision="step2000") or r)
    for extra in ([], ["--sum"]):
        err = _fails(["import", "lm-eval", str(LOGS / "a"), str(two), "--task", "tiny_mc", "--out",
                      str(tmp_path / "out"), *extra], capsys)
        assert "model dummy-a on task tiny_mc again, loaded otherwise than in" in err and "revision" in err
        assert "two models under one name" in err and "pass --sum" not in err


def test_pass_at_k_is_not_read_as_a_share_of_the_repeats(tmp_path, capsys):
    # one right of ten makes pass@10 1.0: read as a share, it was 10 correct of 10
    run = _copy("a", tmp_path / "he")
    samples = next(run.rglob("samples_tiny_qa_*.jsonl"))
    _edit(samples, lambda s: s.update({"pass@10": 1.0, "metrics": [*s["metrics"], "pass@10"]}))
    err = _fails(["import", "lm-eval", str(run), "--task", "tiny_qa", "--metric", "pass@10", "--out",
                  str(tmp_path / "out")], capsys)
    assert "metric 'pass@10' is the chance that one of 10 responses passes, not a share of the 4 repeats" in err
    res = import_logs("lm-eval", [run], task="tiny_qa", metric="pass@10", threshold=1.0)
    assert set(res.trials.values()) == {1} and set(res.correct.values()) == {1}


def test_a_samples_file_saved_with_a_bom_is_read(tmp_path):
    run = _copy("a", tmp_path / "bom")
    p = next(run.rglob("samples_tiny_mc_*.jsonl"))
    p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())  # an editor's save: line 1 was "not valid JSON"
    got, want = import_logs("lm-eval", [run], task="tiny_mc"), import_logs("lm-eval", [LOGS / "a"], task="tiny_mc")
    assert (got.correct, got.trials) == (want.correct, want.trials)


def test_a_lone_results_file_of_a_model_whose_samples_another_run_logged_is_no_loss(tmp_path):
    # an earlier quick run without --log_samples beside the logged one: the model is not left out, so the
    # folder imports (it had been refused, the message claiming the model would be lost)
    root = tmp_path / "lm"
    _copy("b", root / "b")
    res = next((root / "b").rglob("results_*.json"))
    shutil.copy(res, res.with_name("results_2026-11-29T10-00-00.000000.json"))
    got = import_logs("lm-eval", [root], task="tiny_mc")
    assert got.models == import_logs("lm-eval", [LOGS / "b"], task="tiny_mc").models


def test_a_samples_file_beside_its_gzipped_copy_is_one_log(tmp_path):
    import gzip

    run = _copy("b", tmp_path / "b")
    p = next(run.rglob("samples_tiny_mc_*.jsonl"))
    p.with_name(p.name + ".gz").write_bytes(gzip.compress(p.read_bytes()))
    got = import_logs("lm-eval", [run], task="tiny_mc", sum_repeats=True)  # --sum had doubled every trial
    want = import_logs("lm-eval", [LOGS / "b"], task="tiny_mc")
    assert (got.correct, got.trials, got.summed) == (want.correct, want.trials, [])


def test_two_runs_of_one_checkpoint_on_other_devices_are_summed():
    # only the model_args that pick the weights tell two models apart: a device or a batch size does not
    assert lm_eval._weights("pretrained=m1,device=cuda:1,batch_size=8") == lm_eval._weights({"pretrained": "m1"})
    assert lm_eval._weights("dtype=bfloat16,pretrained=m1") == lm_eval._weights({"pretrained": "m1", "dtype": "bfloat16"})
    assert lm_eval._weights({"pretrained": "m1", "revision": "step2000"}) == "pretrained=m1, revision=step2000"
    assert lm_eval._answer_letter("2", ["1", "2", "3", "4"]) is None  # the index 2 or the text "2": unclear
    assert lm_eval._answer_letter(2, ["1", "2", "3", "4"]) == "C"  # a JSON number is an index
    assert lm_eval._answer_letter("1", ["0", "1", "2"]) == "B"  # both readings agree


def test_a_lone_results_file_of_another_task_or_another_checkpoint(tmp_path):
    # with no --task, the task the logs agree on is the one imported: a results file of another task loses
    # nothing; a lone results file of another checkpoint of a logged model's name is a model left out
    root = tmp_path / "lm"
    _copy("a", root / "a")
    for p in (root / "a").rglob("samples_tiny_qa_*.jsonl"):
        p.unlink()
    res = next((root / "a").rglob("results_*.json"))
    other = res.with_name("results_2026-11-29T10-00-00.000000.json")
    _edit(res, lambda r: r)  # (as it is)
    shutil.copy(res, other)
    _edit(other, lambda r: {**r, "configs": {"tiny_qa": r["configs"]["tiny_qa"]},
                            "results": {"tiny_qa": r["results"]["tiny_qa"]}})
    assert import_logs("lm-eval", [root]).task == "tiny_mc"
    _edit(other, lambda r: {**r, "configs": {"tiny_mc": RESULTS["configs"]["tiny_mc"]},
                            "results": {"tiny_mc": RESULTS["results"]["tiny_mc"]},
                            "config": {**r["config"], "model_args": {"pretrained": "dummy-a", "revision": "step2000"}}})
    from benchfill.importers.matrix import ImportProblems

    with pytest.raises(ImportProblems, match=r"no other log holds model dummy-a \(pretrained=dummy-a, revision=step2000\) on tiny_mc"):
        import_logs("lm-eval", [root])


def test_a_results_file_saved_with_a_byte_order_mark_is_read_as_its_samples_are(tmp_path):
    # an editor on Windows saves one so; the samples files beside it were read, the results file was refused
    out = shutil.copytree(LOGS / "a" / "dummy-a", tmp_path / "out")
    results = next(out.glob("results_*.json"))
    results.write_bytes(b"\xef\xbb\xbf" + results.read_bytes())
    res = import_logs("lm-eval", [out], task="tiny_mc")
    assert res.models == ["dummy-a"] and len(res.item_ids) == 6


# a task's samples missing beside the run's others, the NAME.json layout, checkpoints, groups, few-shot --------


def test_a_model_missing_the_imported_tasks_samples_is_refused_though_it_logged_another_task(tmp_path, capsys):
    # lm-eval writes the results file, then one samples file per task, and only warns where a write fails:
    # a run stopped between its tasks' files had dropped its model from the import without a word
    logs = tmp_path / "logs"
    _copy("a", logs / "a")
    _copy("b", logs / "b")
    next((logs / "b").rglob("samples_tiny_mc_*")).unlink()
    err = _fails(["import", "lm-eval", str(logs), "--task", "tiny_mc", "--out", str(tmp_path / "out")], capsys)
    assert "results_2026-11-30T14-55-05.453927.json: no samples_<task>_" in err and "beside it for tiny_mc" in err
    assert "dummy-b" in err and not (tmp_path / "out").exists()
    # the task whose samples it did log still imports, both models
    assert import_logs("lm-eval", [logs], task="tiny_qa").models == ["dummy-a", "dummy-b"]


def test_a_run_of_the_output_path_name_json_layout_without_samples_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    for run in ("a", "b"):  # lm-eval >= 0.4.9, --output_path out/run.json: out/run_<time>.json, samples beside
        for f in (LOGS / run).rglob("*.json*"):
            shutil.copy(f, out / f.name.replace("results_", "run_"))
    for f in out.glob("samples_*14-55-05*"):
        f.unlink()
    err = _fails(["import", "lm-eval", str(out), "--task", "tiny_mc", "--out", str(tmp_path / "o")], capsys)
    assert "run_2026-11-30T14-55-05.453927.json: no samples_<task>_" in err and "dummy-b" in err


def test_checkpoints_told_apart_by_subfolder_or_quantization_are_not_summed(tmp_path, capsys):
    for arg, one, two in (("subfolder", "step1000", "step9000"), ("quantization", None, "awq"),
                          ("gguf_file", "m-Q4.gguf", "m-Q8.gguf")):  # fmt: skip
        again = _copy("a-again", tmp_path / arg / "two")
        first = _copy("a", tmp_path / arg / "one")
        for root, value in ((first, one), (again, two)):
            if value is not None:
                _edit(next(root.rglob("results_*.json")), lambda r, k=arg, v=value: r["config"]["model_args"].update({k: v}) or r)
        err = _fails(["import", "lm-eval", str(first), str(again), "--task", "tiny_mc", "--sum", "--out",
                      str(tmp_path / "out")], capsys)
        assert "two models under one name" in err and f"{arg}={two}" in err, arg


def test_a_group_is_imported_as_one_benchmark_of_its_subtasks(tmp_path, capsys):
    # lm-eval's mmlu logs one samples file per subtask and none of its own: --task mmlu had found no log
    logs = tmp_path / "logs"
    for run in ("a", "b"):
        root = _copy(run, logs / run)
        _edit(next(root.rglob("results_*.json")),
              lambda r: r.update(group_subtasks={"mmlu": ["mmlu_stem"], "mmlu_stem": ["tiny_mc", "tiny_qa"],
                                                 "tiny_mc": [], "tiny_qa": []},
                                 results={**r["results"], "mmlu": {"alias": "mmlu"}, "mmlu_stem": {}}) or r)  # fmt: skip
    out = tmp_path / "o"
    assert main(["import", "lm-eval", str(logs), "--task", "mmlu", "--out", str(out)]) == 0, capsys.readouterr().err
    assert "task mmlu (2 subtasks as one), 2 model(s) x 12 item(s) from 4 log(s); metric acc, exact_match" in capsys.readouterr().out
    one = {t: import_logs("lm-eval", [logs], task=t) for t in ("tiny_mc", "tiny_qa")}
    rows = _rows(out)
    assert rows == {k: (one[t].correct[k], one[t].trials[k]) for t in one for k in one[t].trials}
    summary = json.loads((out / "import.json").read_text())
    assert summary["task"] == "mmlu" and summary["subtasks"] == ["tiny_mc", "tiny_qa"]
    assert {json.loads(x)["task"] for x in (out / "items.jsonl").read_text().splitlines()} == {"tiny_mc", "tiny_qa"}
    # one subtask scored by two defaults (one model's log of it carries acc too): refused, as for one task
    qa = next((logs / "b").rglob("samples_tiny_qa_*"))
    kept = qa.read_bytes()
    _edit(qa, lambda r: r.update({"acc": r["exact_match"], "metrics": ["acc", *r["metrics"]]}))
    err = _fails(["import", "lm-eval", str(logs), "--task", "mmlu", "--out", str(tmp_path / "o1")], capsys)
    assert "the logs on tiny_qa score with different default metrics (acc, exact_match)" in err
    qa.write_bytes(kept)
    # a model whose samples of one subtask are missing is refused, as for one task
    qa.unlink()
    err = _fails(["import", "lm-eval", str(logs), "--task", "mmlu", "--out", str(tmp_path / "o2")], capsys)
    assert "beside it for tiny_qa" in err and "dummy-b" in err
    err = _fails(["import", "lm-eval", str(logs), "--task", "nope", "--out", str(tmp_path / "o3")], capsys)
    assert "no log holds task 'nope' (found: tiny_mc, tiny_qa)" in err


def test_the_same_task_run_with_another_num_fewshot_names_it(tmp_path, capsys):
    five = _copy("b", tmp_path / "five")
    _edit(next(five.rglob("results_*.json")), lambda r: r["configs"]["tiny_mc"].update(num_fewshot=5) or r)
    err = _fails(["import", "lm-eval", str(LOGS / "a"), str(five), "--task", "tiny_mc", "--out",
                  str(tmp_path / "o")], capsys)
    before = json.loads(next((LOGS / "a").rglob("results_*.json")).read_text())["configs"]["tiny_mc"].get("num_fewshot")
    assert "reads differently than in" in err and f"task setting num_fewshot: {json.dumps(before)} against 5" in err


def test_pass_at_k_refusal_names_the_metrics_the_log_has(tmp_path, capsys):
    run = _copy("a", tmp_path / "he")
    samples = next(run.rglob("samples_tiny_qa_*.jsonl"))
    # humaneval_64 logs pass@2 ... pass@64 and no pass@1
    _edit(samples, lambda s: s.update({"pass@2": 1.0, "pass@8": 1.0, "metrics": ["pass@2", "pass@8"]}))
    err = _fails(["import", "lm-eval", str(run), "--task", "tiny_qa", "--metric", "pass@2", "--out",
                  str(tmp_path / "out")], capsys)
    assert "the log has no other metric (pass@2, pass@8)" in err and "import pass@1" not in err
