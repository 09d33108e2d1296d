"""Importers read logs written by lm-eval-harness and inspect_ai themselves into one response matrix.

The lm-eval logs are committed (tests/fixtures/lm_eval, made by the real lm-eval with its dummy
model; lm-eval pulls torch, which CI does not install). The inspect_ai logs are made here, offline,
by inspect_ai's own eval() with its mockllm provider.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from benchfill.cli import main
from benchfill.importers import ImportProblems, import_logs, write

LOGS = Path(__file__).resolve().parent / "fixtures" / "lm_eval" / "logs"
# inspect_ai's retry set-up trips a tenacity deprecation notice; nothing of ours
pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")


def _rows(out: Path) -> dict[tuple[str, str], tuple[int, int]]:
    with (out / "responses.csv").open() as fh:
        return {(r["model"], r["item_id"]): (int(r["correct"]), int(r["trials"])) for r in csv.DictReader(fh)}


def _samples(run: str, task: str) -> list[dict]:
    path = next((LOGS / run).rglob(f"samples_{task}_*.jsonl"))
    return [json.loads(x) for x in path.read_text().splitlines()]


# -- lm-eval-harness ---------------------------------------------------------------------------------


def test_lm_eval_logs_become_one_matrix_that_diagnose_reads(tmp_path, capsys):
    out = tmp_path / "mc"
    args = ["import", "lm-eval", str(LOGS / "a"), str(LOGS / "b"), str(LOGS / "c"), "--task", "tiny_mc", "--out", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "task tiny_mc, 3 model(s) x 6 item(s) from 3 log(s); metric acc" in text
    assert "partial: dummy-c has 4 of 6 items" in text
    rows = _rows(out)
    for run, model in (("a", "dummy-a"), ("b", "dummy-b"), ("c", "dummy-c")):
        for s in _samples(run, "tiny_mc"):  # every sample's own acc, one trial each
            assert rows[(model, f"tiny_mc/{s['doc_id']}")] == (int(s["acc"]), 1)
    assert len(rows) == 6 + 6 + 4
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert items[1]["text"] == "Question: What is 2 + 2?\nAnswer:" and items[1]["target"] == "1"
    assert items[1]["choices"] == ["lol", "4", "Paris", "blue"]
    summary = json.loads((out / "import.json").read_text())
    assert summary["metric"] == "acc" and summary["threshold"] is None and summary["partial_models"] == {"dummy-c": 4}
    import hashlib

    assert summary["files_sha256"] == {n: hashlib.sha256((out / n).read_bytes()).hexdigest()
                                       for n in ("responses.csv", "items.jsonl")}  # the files it was written with
    capsys.readouterr()
    assert main(["diagnose", "--responses", str(out / "responses.csv"), "--items", str(out / "items.jsonl"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "max_gap" in json.dumps(report)


def test_lm_eval_repeats_become_trials_and_graded_scores_need_a_threshold(tmp_path):
    res = import_logs("lm-eval", [LOGS / "a", LOGS / "b"], task="tiny_qa")
    assert res.metric == "exact_match"
    answers = {s["doc_id"]: s["doc"]["answer"] for s in _samples("a", "tiny_qa")}
    for doc_id, answer in answers.items():  # the dummy model always says "lol", four times (repeats: 4)
        key = ("dummy-a", f"tiny_qa/{doc_id}")
        assert (res.correct[key], res.trials[key]) == ((4 if answer == "lol" else 0), 4)
    with pytest.raises(ImportProblems, match=r"metric 'overlap' \(0\.\d+\) is not a share of the 4 repeats; pass --threshold"):
        import_logs("lm-eval", [LOGS / "a"], task="tiny_qa", metric="overlap")
    graded = import_logs("lm-eval", [LOGS / "a"], task="tiny_qa", metric="overlap", threshold=0.5)
    overlap = {s["doc_id"]: s["overlap"] for s in _samples("a", "tiny_qa")}
    for doc_id, v in overlap.items():
        assert graded.correct[("dummy-a", f"tiny_qa/{doc_id}")] == int(v >= 0.5)
        assert graded.trials[("dummy-a", f"tiny_qa/{doc_id}")] == 1
    write(graded, tmp_path)
    assert json.loads((tmp_path / "import.json").read_text())["threshold"] == 0.5


def test_same_model_twice_is_an_error_unless_summed():
    with pytest.raises(ImportProblems, match=r"model dummy-a on task tiny_mc again \(first in .*logs/a/.*\); pass --sum"):
        import_logs("lm-eval", [LOGS / "a", LOGS / "a-again"], task="tiny_mc")
    res = import_logs("lm-eval", [LOGS / "a", LOGS / "a-again"], task="tiny_mc", sum_repeats=True)
    first, again = _samples("a", "tiny_mc"), _samples("a-again", "tiny_mc")
    for s, t in zip(first, again, strict=True):
        key = ("dummy-a", f"tiny_mc/{s['doc_id']}")
        assert (res.correct[key], res.trials[key]) == (int(s["acc"]) + int(t["acc"]), 2)
    assert len(res.summed) == 1


def _bad(tmp_path: Path) -> dict[str, Path]:
    """Bad logs made from real ones: truncated, another tool's, and the reworded task's."""
    trunc = tmp_path / "trunc" / "dummy-b"
    shutil.copytree(LOGS / "b" / "dummy-b", trunc)
    sample = next(trunc.glob("samples_tiny_mc_*.jsonl"))
    data = sample.read_bytes()
    sample.write_bytes(data[: len(data) - 200])  # cut inside the last line, as a killed run leaves it
    other = tmp_path / "other" / "samples_tiny_mc_2026-01-01T00-00-00.000000.jsonl"
    other.parent.mkdir()
    other.write_text('{"id": "s1", "epoch": 1, "scores": {"match": {"value": "C"}}}\n')
    return {"truncated": sample, "wrong": other, "reworded": next((LOGS / "reworded").rglob("samples_*.jsonl"))}


def test_bad_lm_eval_logs_give_one_line_each_and_write_nothing(tmp_path, capsys):
    bad = _bad(tmp_path)
    out = tmp_path / "out"
    assert main(["import", "lm-eval", str(LOGS / "a"), str(bad["truncated"]), str(bad["wrong"]),
                 "--task", "tiny_mc", "--out", str(out)]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err
    assert f"{bad['truncated']} line 6: not valid JSON (a truncated log?)" in err[0]
    assert "no results_2026-01-01T00-00-00.000000.json beside it" in err[1]
    assert not out.exists()
    # conflicting texts name both files
    assert main(["import", "lm-eval", str(LOGS / "a"), str(bad["reworded"]), "--task", "tiny_mc", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "item tiny_mc/0 reads differently than in" in err[0]
    assert str(bad["reworded"]) in err[0] and "logs/a/dummy-a/samples_tiny_mc_" in err[0]
    # mixed tasks
    assert main(["import", "lm-eval", str(LOGS / "a"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the logs mix tasks: tiny_mc" in err[0] and "tiny_qa" in err[0] and "--task" in err[0]
    assert not out.exists()
    # an existing output is left as it was
    out.mkdir()
    (out / "responses.csv").write_text("keep me\n")
    assert main(["import", "lm-eval", str(bad["truncated"]), "--out", str(out)]) == 2
    assert (out / "responses.csv").read_text() == "keep me\n" and sorted(p.name for p in out.iterdir()) == ["responses.csv"]


def test_repeated_item_texts_are_dropped_as_each_log_is_read_and_the_merge_is_unchanged():
    """Every model's log repeats the items' texts; they are dropped once read, so the import's memory
    follows the distinct items rather than the number of logs (bench/bench_import.py). A copy that reads
    otherwise is kept, so the merge reports it as before."""
    from benchfill.importers.matrix import ItemText, LogContent, Record, drop_repeated_texts, merge

    def log(model: str, task: str, texts: dict[str, str]) -> LogContent:
        out = LogContent(source=f"{model}.jsonl", model=model, task=task)
        for i, text in texts.items():
            out.records.append(Record(model, task, f"{task}/{i}", 1, 1, out.source))
            out.items.append(ItemText(f"{task}/{i}", task, {"task": task, "text": text, "target": "a"}, out.source))
        return out

    alike = [log("m1", "t", {"0": "x", "1": "y"}), log("m2", "t", {"0": "x", "1": "y"}),
             log("m3", "u", {"0": "x"})]  # fmt: skip
    firsts: dict = {}
    for one in alike:
        drop_repeated_texts(one, firsts)
    # the second log's copies go; another task's item of the same id is its own first copy
    assert [len(one.items) for one in alike] == [2, 0, 1]
    whole = [log("m1", "t", {"0": "x", "1": "y"}), log("m2", "t", {"0": "x", "1": "y"})]
    assert merge("lm-eval", alike[:2], metric="acc", threshold=None).items == merge("lm-eval", whole, metric="acc", threshold=None).items
    differ = [log("m1", "t", {"0": "x", "1": "y"}), log("m2", "t", {"0": "x", "1": "z"})]
    firsts = {}
    for one in differ:
        drop_repeated_texts(one, firsts)
    assert [it.item_id for it in differ[1].items] == ["t/1"]
    with pytest.raises(ImportProblems, match="m2.jsonl: item t/1 reads differently than in m1.jsonl"):
        merge("lm-eval", differ, metric="acc", threshold=None)


# -- inspect_ai ----------------------------------------------------------------------------------------


QUESTIONS = [(f"q{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(1, 7)]


def _mock(name: str, right: set[str], flip_epoch: int | None = None):
    """A mockllm model that answers the questions in ``right`` correctly (and, on ``flip_epoch``,
    only those); inspect_ai calls it like any provider."""
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    calls: dict[str, int] = {}

    def reply(messages, tools, tool_choice, config):
        text = messages[-1].text
        qid, _, answer = next(q for q in QUESTIONS if q[1] == text)
        calls[qid] = calls.get(qid, 0) + 1
        good = qid in right and not (flip_epoch and calls[qid] == flip_epoch and qid != "q1")
        out = ModelOutput.from_content(model=name, content=answer if good else "no idea")
        out.usage = ModelUsage(input_tokens=8, output_tokens=2, total_tokens=10)  # no tokenizer download
        return out

    return get_model(f"mockllm/{name}", custom_outputs=reply)


def _task(name: str = "arith", n: int = 6, scorer=None):
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    samples = [Sample(id=q, input=text, target=ans) for q, text, ans in QUESTIONS[:n]]
    return Task(dataset=samples, solver=generate(), scorer=scorer or match(), name=name)


@pytest.fixture(scope="module")
def inspect_logs(tmp_path_factory):
    from inspect_ai import eval as inspect_eval
    from inspect_ai.scorer import Score, mean, scorer

    root = tmp_path_factory.mktemp("inspect")
    kw = {"display": "none", "max_connections": 4}
    inspect_eval(_task(), model=_mock("alpha", {"q1", "q2", "q3"}, flip_epoch=2), epochs=3,
                 log_dir=str(root / "main"), log_format="eval", **kw)  # fmt: skip
    inspect_eval(_task(), model=_mock("beta", {"q1", "q4"}), epochs=3, log_dir=str(root / "main"), log_format="json", **kw)
    inspect_eval(_task(n=4), model=_mock("gamma", {"q2"}), epochs=3, log_dir=str(root / "main"), log_format="json", **kw)
    inspect_eval(_task("other"), model=_mock("alpha", {"q1"}), log_dir=str(root / "other"), **kw)

    @scorer(metrics=[mean()])
    def graded():
        async def score(state, target):
            got = state.output.completion
            return Score(value=1.0 if got == target.text else 0.25)

        return score

    inspect_eval(_task(scorer=graded()), model=_mock("alpha", {"q1"}), log_dir=str(root / "graded"), **kw)
    return root


def test_inspect_logs_in_both_formats_become_one_matrix(inspect_logs, tmp_path, capsys):
    logs = sorted((inspect_logs / "main").iterdir())
    assert {p.suffix for p in logs} == {".eval", ".json"}
    out = tmp_path / "out"
    assert main(["import", "inspect", *map(str, logs), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "inspect: task arith, 3 model(s) x 6 item(s) from 3 log(s); metric match" in text
    assert "partial: mockllm/gamma has 4 of 6 items" in text
    rows = _rows(out)
    # alpha: q1 right in every epoch; q2, q3 right except in epoch 2; the rest wrong; 3 epochs = 3 trials
    assert rows[("mockllm/alpha", "arith/q1")] == (3, 3)
    assert rows[("mockllm/alpha", "arith/q2")] == (2, 3) and rows[("mockllm/alpha", "arith/q6")] == (0, 3)
    assert rows[("mockllm/beta", "arith/q4")] == (3, 3) and rows[("mockllm/beta", "arith/q2")] == (0, 3)
    assert ("mockllm/gamma", "arith/q5") not in rows and rows[("mockllm/gamma", "arith/q2")] == (3, 3)
    items = {json.loads(x)["id"]: json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()}
    assert items["arith/q3"]["text"] == "What is 3 + 3?" and items["arith/q3"]["target"] == "6"
    capsys.readouterr()
    assert main(["diagnose", "--responses", str(out / "responses.csv"), "--items", str(out / "items.jsonl")]) == 0
    assert "max gap" in capsys.readouterr().out.lower()


def test_inspect_graded_scores_need_a_threshold(inspect_logs, tmp_path):
    with pytest.raises(ImportProblems, match=r"metric 'graded' is not binary \(value 0\.25\); pass --threshold"):
        import_logs("inspect", [inspect_logs / "graded"])
    res = import_logs("inspect", [inspect_logs / "graded"], threshold=0.5)
    assert res.correct[("mockllm/alpha", "arith/q1")] == 1 and res.correct[("mockllm/alpha", "arith/q2")] == 0
    write(res, tmp_path)
    assert json.loads((tmp_path / "import.json").read_text())["threshold"] == 0.5


def test_bad_inspect_logs_give_one_line_each(inspect_logs, tmp_path, capsys):
    good = next(p for p in (inspect_logs / "main").iterdir() if p.suffix == ".eval")
    trunc = tmp_path / "cut.eval"
    trunc.write_bytes(good.read_bytes()[:2000])
    wrong = next(LOGS.rglob("results_*.json"))  # an lm-eval results file
    out = tmp_path / "out"
    assert main(["import", "inspect", str(trunc), str(wrong), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err
    assert err[0].startswith(f"benchfill: error: {trunc}: not a readable inspect_ai eval log")
    assert err[1].startswith(f"benchfill: error: {wrong}: not a readable inspect_ai eval log")
    assert main(["import", "inspect", str(inspect_logs / "main"), str(inspect_logs / "other"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the logs mix tasks" in err[0]
    assert not out.exists()
    # a log of lm-eval given as inspect, and one of inspect given as lm-eval
    assert main(["import", "lm-eval", str(good), "--out", str(out)]) == 2
    assert "not an lm-eval-harness samples file" in capsys.readouterr().err


def _edited_log(tmp_path: Path, name: str, edit_sample=None, edit_results=None, raw: bytes | None = None) -> Path:
    """A copy of run a's logs with its first tiny_mc sample or its results file changed."""
    root = tmp_path / name
    shutil.copytree(LOGS / "a", root)
    sample = next(root.rglob("samples_tiny_mc_*.jsonl"))
    results = next(root.rglob("results_*.json"))
    if edit_sample is not None:
        rows = [json.loads(x) for x in sample.read_text().splitlines()]
        edit_sample(rows[0])
        sample.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if edit_results is not None:
        results.write_text(json.dumps(edit_results(json.loads(results.read_text()))))
    if raw is not None:
        sample.write_bytes(raw)
    return sample


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        ({"edit_sample": lambda s: s.__setitem__("doc_id", "abc")}, r"line 1: field 'doc_id' must be an integer"),
        ({"edit_sample": lambda s: s.__setitem__("metrics", [])}, r"line 1: field 'metrics' must be a non-empty list"),
        ({"edit_results": lambda r: [r]}, r"results_.*\.json: not an lm-eval results file"),
        ({"edit_results": lambda r: {**r, "configs": {"tiny_mc": {"repeats": "x"}}}},
         r"configs\.tiny_mc\.repeats must be a positive integer, found 'x'"),
        ({"edit_results": lambda r: {**r, "configs": {"tiny_mc": {"repeats": -3}}}},
         r"configs\.tiny_mc\.repeats must be a positive integer, found -3"),
        ({"raw": b'{"doc_id": 0, "metrics": ["acc"], "acc": 1, "doc": "\xff"}\n'}, r"not a UTF-8 text file"),
    ],
)
def test_malformed_lm_eval_fields_give_one_line_naming_file_and_line(tmp_path, capsys, edit, pattern):
    import re

    sample = _edited_log(tmp_path, "edited", **edit)
    out = tmp_path / "out"
    assert main(["import", "lm-eval", str(sample), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and re.search(pattern, err), err
    assert not out.exists()


def test_an_output_in_the_way_leaves_the_earlier_import_whole(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "items.jsonl").mkdir(parents=True)
    (out / "responses.csv").write_text("keep me\n")
    assert main(["import", "lm-eval", str(LOGS / "a"), "--task", "tiny_mc", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "items.jsonl is a folder" in err, err
    assert (out / "responses.csv").read_text() == "keep me\n"
    assert sorted(p.name for p in out.iterdir()) == ["items.jsonl", "responses.csv"]


def test_staged_files_a_killed_import_left_are_swept_by_the_next(tmp_path):
    import os

    out = tmp_path / "out"
    out.mkdir()
    left = out / ".items.jsonl.kvnir1go.tmp"
    left.write_text("half")
    os.utime(left, (0, 0))
    assert main(["import", "lm-eval", str(LOGS / "a"), "--task", "tiny_mc", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["import.json", "items.jsonl", "responses.csv"]


def test_an_inspect_before_exclude_fields_still_reads_logs(inspect_logs, monkeypatch):
    # inspect-ai gained read_eval_log(exclude_fields=...) in 0.3.241; the declared minimum is 0.3.100, where
    # the keyword made every log "not a readable inspect_ai eval log (TypeError ...)"
    import inspect_ai.log

    real = inspect_ai.log.read_eval_log

    def before_0_3_241(log_file, header_only=False, resolve_attachments=False, format="auto"):
        return real(log_file, header_only=header_only, resolve_attachments=resolve_attachments, format=format)

    monkeypatch.setattr(inspect_ai.log, "read_eval_log", before_0_3_241)
    res = import_logs("inspect", [inspect_logs / "main"])
    assert res.correct[("mockllm/alpha", "arith/q1")] == 3


def test_a_signal_during_an_inspect_read_ends_the_command_after_the_read_not_inside_it(tmp_path, capsys):
    # inspect_ai reads a log in an event loop of its own: Ctrl-C landing there tore it down mid-read, and the
    # teardown's RuntimeError was reported as "not a readable inspect_ai eval log", with tracebacks.
    import os
    import signal

    from benchfill.errors import Terminated
    from benchfill.importers.inspect_log import _read

    read_through = []

    def read(path, **kw):  # a read that the signal reaches half-way
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100):  # the handler runs between bytecodes: here, if it were not held
            pass
        read_through.append(path)
        return "log"

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        _read(read, tmp_path / "a.eval")
    assert read_through == [str(tmp_path / "a.eval")]  # read to its end, then interrupted
    assert capsys.readouterr().err == (f"benchfill: stopping once {tmp_path / 'a.eval'} is read; press Ctrl-C "
                                       "again to stop now\n")  # at once: a large log takes seconds
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before

    # SIGTERM goes to the handler it was meant for (the CLI's raises Terminated), after the read
    def terminated(signum, frame):
        raise Terminated(signum)

    old = signal.signal(signal.SIGTERM, terminated)
    try:
        def read_term(path, **kw):
            os.kill(os.getpid(), signal.SIGTERM)
            read_through.append("term")
            return "log"

        with pytest.raises(Terminated):
            _read(read_term, tmp_path / "b.eval")
        assert read_through[-1] == "term"

        # asked twice: not held the second time
        def read_twice(path, **kw):
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100):
                pass
            read_through.append("twice")
            return "log"

        with pytest.raises(KeyboardInterrupt):
            _read(read_twice, tmp_path / "c.eval")
        assert read_through[-1] == "term"  # stopped inside the read
        assert signal.getsignal(signal.SIGTERM) is terminated
    finally:
        signal.signal(signal.SIGTERM, old)
    # no signal: the read's own result
    assert _read(lambda path, **kw: f"read {path}", tmp_path / "d.eval") == f"read {tmp_path / 'd.eval'}"


def test_names_from_the_logs_are_printed_with_their_control_characters_escaped():
    # a model name holding an escape sequence or a bidi override reached the terminal raw in the import's summary
    from benchfill.importers.matrix import ImportResult

    bad = "dummy\x1b[31mRED\x1b[0m\u202e"
    res = ImportResult(tool="lm-eval", metric="acc", threshold=None, task="t\tq", models=[bad, "b"],
                       item_ids=["1", "2"], correct={}, trials={}, items={}, sources=[], partial={bad: 1},
                       summed=[f"{bad}/1"], errored={bad: ["1\n2"]}, errored_samples=1)
    said = "\n".join(res.lines() + res.warnings())
    assert "\x1b" not in said and "\u202e" not in said and "\t" not in said
    assert "partial: dummy\\x1b[31mRED\\x1b[0m\\u202e has 1 of 2 items" in said and "1\\n2" in said
