"""QA findings: samples that errored in a finished inspect log, lm-eval results fields of the wrong type,
and bad lines in a simulated world's state file.

The inspect_ai logs are made here by inspect_ai's own eval() with its mockllm provider (seconds); the
lm-eval logs are copies of the committed fixture (tests/fixtures/lm_eval) with one field changed.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from test_sweep_config import GOOD as SWEEP  # a one-run sweep of demo

from benchfill.cli import main

LOGS = Path(__file__).resolve().parent / "fixtures" / "lm_eval" / "logs"
# inspect_ai's retry set-up trips a tenacity deprecation notice; nothing of ours
pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")

QUESTIONS = [(f"q{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(1, 7)]


def _rows(out: Path) -> dict[tuple[str, str], tuple[int, int]]:
    with (out / "responses.csv").open() as fh:
        return {(r["model"], r["item_id"]): (int(r["correct"]), int(r["trials"])) for r in csv.DictReader(fh)}


# -- inspect_ai: samples that errored in a finished log ------------------------------------------------


def _model(name: str, fail: set[str], fail_first: set[str] = frozenset()):
    """A mockllm model that answers every question right, except that it raises on those in ``fail``
    (every epoch) and on the first call of those in ``fail_first``."""
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    calls: dict[str, int] = {}

    def reply(messages, tools, tool_choice, config):
        qid, _, answer = next(q for q in QUESTIONS if q[1] == messages[-1].text)
        calls[qid] = calls.get(qid, 0) + 1
        if qid in fail or (qid in fail_first and calls[qid] == 1):
            raise RuntimeError("boom")
        out = ModelOutput.from_content(model=name, content=answer)
        out.usage = ModelUsage(input_tokens=8, output_tokens=2, total_tokens=10)  # no tokenizer download
        return out

    return get_model(f"mockllm/{name}", custom_outputs=reply)


@pytest.fixture(scope="module")
def errored_logs(tmp_path_factory):
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    root = tmp_path_factory.mktemp("inspect_errors")
    task = Task(dataset=[Sample(id=q, input=t, target=a) for q, t, a in QUESTIONS], solver=generate(),
                scorer=match(), name="arith")  # fmt: skip
    kw = {"display": "none", "max_connections": 1, "epochs": 2, "log_dir": str(root), "fail_on_error": False}
    logs = inspect_eval(task, model=_model("g", {"q5", "q6"}, {"q4"}), **kw)
    assert logs[0].status == "success"  # a finished eval that tolerated the errors
    inspect_eval(task, model=_model("h", {"q6"}), **kw)
    return root


def test_errored_inspect_samples_are_named_recorded_and_never_wrong_answers(errored_logs, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["import", "inspect", str(errored_logs), "--out", str(out)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("benchfill: warning: 7 sample(s) errored"), err
    assert "mockllm/g: arith/q4, arith/q5, arith/q6" in err[0] and "mockllm/h: arith/q6" in err[0]  # logs in any order
    summary = json.loads((out / "import.json").read_text())
    assert summary["errored"] == {"mockllm/g": ["arith/q4", "arith/q5", "arith/q6"], "mockllm/h": ["arith/q6"]}
    rows = _rows(out)
    assert rows[("mockllm/g", "arith/q1")] == (2, 2)
    assert rows[("mockllm/g", "arith/q4")] == (1, 1)  # the epoch that errored is no trial
    assert ("mockllm/g", "arith/q5") not in rows and rows[("mockllm/h", "arith/q5")] == (2, 2)
    assert not any(i == "arith/q6" for _, i in rows)  # errored for every model: no row, not a 0
    assert summary["partial_models"] == {"mockllm/g": 4}
    items = {json.loads(x)["id"]: json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()}
    assert items["arith/q6"]["text"] == "What is 6 + 6?" and items["arith/q6"]["target"] == "12"


def test_the_warning_names_at_most_ten_items(errored_logs, tmp_path):
    from benchfill.importers import import_logs

    res = import_logs("inspect", [errored_logs])
    res.errored = {"m": [f"arith/x{i}" for i in range(12)]}
    (line,) = res.warnings()
    assert "arith/x9" in line and "arith/x10" not in line and line.endswith(" and 2 more")


# -- lm-eval: results and samples fields of the wrong type ---------------------------------------------


def _results_edit(**fields):
    def edit(r):
        r.pop("model_name")
        return {**r, **fields}

    return edit


@pytest.mark.parametrize(
    ("results", "sample", "pattern"),
    [
        (_results_edit(config="hf"), None, r"results_[^:]*\.json: field 'config' must be an object.*found \"hf\""),
        (_results_edit(config=[1]), None, r"results_[^:]*\.json: field 'config' must be an object"),
        (_results_edit(config={"model": 5}), None, r"results_[^:]*\.json: field 'config\.model' must be a string"),
        (lambda r: {**r, "model_name": {"a": 1}}, None, r"results_[^:]*\.json: field 'model_name' must be a string"),
        (None, lambda s: s.__setitem__("filtered_resps", {"a": 1}),
         r"samples_tiny_qa_[^:]*\.jsonl line 1: field 'filtered_resps' must be a list"),
    ],
)
def test_lm_eval_fields_of_the_wrong_type_give_one_line(tmp_path, capsys, results, sample, pattern):
    import re

    root = tmp_path / "a"
    shutil.copytree(LOGS / "a", root)
    if results is not None:
        path = next(root.rglob("results_*.json"))
        path.write_text(json.dumps(results(json.loads(path.read_text()))))
    if sample is not None:  # tiny_qa has repeats: 4, where filtered_resps counts the responses scored
        path = next(root.rglob("samples_tiny_qa_*.jsonl"))
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        sample(rows[0])
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(["import", "lm-eval", str(root), "--task", "tiny_qa", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and re.search(pattern, err), err
    assert not out.exists()


# -- the simulated world's state file --------------------------------------------------------------------

CUT = b'{"world_seed": 0, "key": "abc", "id": "x-s'  # a record a killed server left half-written


def _world(items, state: Path):
    from benchfill.sim import World

    return World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", seed=4,
                            state_path=state)  # fmt: skip


@pytest.fixture(scope="module")
def items(shared_data):
    return [json.loads(x) for x in open(shared_data / "aime24" / "items.jsonl")][:4]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b'{"a": 1}', "no key, id, fields, difficulty, chance, answer, stated"),
        (b"[1]", "a JSON list, not an object"),
        (b"\xff\xfe\x00garbage", "not UTF-8 text"),
        (b"not json", "not JSON"),
        (b'{"key": "k", "id": "c", "fields": {}, "difficulty": "hard", "chance": 0, "answer": "1", "stated": "1"}',
         "field 'difficulty' must be a number, found \"hard\""),
    ],
)
def test_a_bad_state_line_is_named_by_file_and_line(items, tmp_path, line, why):
    from benchfill.errors import DataError

    state = tmp_path / "st.jsonl"
    # line 1: a cut record with the next one's newline after it, passed over as before
    state.write_bytes(CUT + b"\n" + line + b"\n")
    with pytest.raises(DataError) as exc:
        _world(items, state)
    assert str(exc.value) == f"{state} line 2: not a child record ({why})"


def test_sim_serve_fails_on_a_bad_state_line_in_one_line(tmp_path):
    import subprocess
    import sys

    state = tmp_path / "st.jsonl"
    state.write_text('{"a": 1}\n')
    # a subprocess with a timeout: a loader that let the line through would serve until killed
    r = subprocess.run([sys.executable, "-m", "benchfill", "sim", "serve", "--benchmark", "demo", "--port", "0",
                        "--state", str(state)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"benchfill: error: {state} line 1: not a child record (no key, id, fields, difficulty, " \
                       f"chance, answer, stated)\n"  # fmt: skip


def test_state_lines_a_crash_left_are_still_passed_over(items, tmp_path):
    from benchfill.sim.world import SimItem

    state = tmp_path / "st.jsonl"
    first = _world(items, state)
    first.register_child(SimItem("k1", "c1", {"problem": "p1", "answer": "1"}, 0.3, 0.0, "1", "1", parent=items[0]["id"]))
    with state.open("ab") as fh:
        fh.write(b"\n" + CUT + b"\n")  # a blank line, and a record cut short by a crash
    first.register_child(SimItem("k2", "c2", {"problem": "p2", "answer": "2"}, 0.1, 0.0, "2", "2"))
    with state.open("ab") as fh:
        fh.write(CUT)  # being written: no newline yet
    again = _world(items, state)
    assert again.lookup("c1").difficulty == 0.3 and again.lookup("c2").parent is None
    # A record written after a line a crash cut short ends that line first: joined to it, it was lost.
    again.register_child(SimItem("k3", "c3", {"problem": "p3", "answer": "3"}, 0.2, 0.0, "3", "3"))
    assert _world(items, state).lookup("c3").difficulty == 0.2
    with state.open("ab") as fh:  # then a bad line: named by its line in the file
        fh.write(b"[2]\n")
    from benchfill.errors import DataError

    with pytest.raises(DataError, match=rf"^{state} line 7: not a child record \(a JSON list"):
        again.refresh()


def test_a_child_whose_record_cannot_be_written_is_not_known_either(items, tmp_path, monkeypatch):
    # Held in memory before its write: the write failed (no file descriptor left), the client's retry found
    # the child in memory and was answered, and the world's other processes never learned of it.
    import builtins

    from benchfill.sim.world import SimItem

    state = tmp_path / "st.jsonl"
    world = _world(items, state)
    real_open = builtins.open

    def no_fd(path, *a, **k):
        if str(path) == str(state):
            raise OSError(24, "Too many open files", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", no_fd)
    child = SimItem("k9", "c9", {"problem": "p9", "answer": "9"}, 0.4, 0.0, "9", "9")
    with pytest.raises(OSError):
        world.register_child(child)
    assert world.lookup("c9") is None
    monkeypatch.setattr(builtins, "open", real_open)
    world.register_child(child)  # the retry
    assert _world(items, state).lookup("c9").difficulty == 0.4




def test_a_resumed_sweep_names_a_bad_state_line(tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP)
    assert main(["sweep", "--config", str(path), "--quiet"]) == 0
    (state,) = (tmp_path / "runs").glob("demo-benchfill-*/sim_world_state.jsonl")
    n = len(state.read_text().splitlines())
    with state.open("a") as fh:
        fh.write("[1]\n")
    capsys.readouterr()
    assert main(["sweep", "--config", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{state} line {n + 1}: not a child record (a JSON list, not an object)" in err
