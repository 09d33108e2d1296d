"""inspect_ai log folders as inspect leaves them, and the merge every importer shares.

The logs are made here, offline, by inspect_ai's own eval() and eval_set() with its mockllm provider:
an eval-set folder (with inspect's eval-set.json and logs.json beside the logs), a JSON log, and a run
that errored. The merge and write checks build their logs in memory.
"""

from __future__ import annotations

import csv
import fcntl
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from benchfill.cli import main
from benchfill.importers.inspect_log import find_logs
from benchfill.importers.matrix import ItemText, LogContent, Record, merge, write

# inspect_ai's retry set-up trips a tenacity deprecation notice; nothing of ours
pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")

QUESTIONS = [("q1", "What is 1 + 1?", "2"), ("q2", "What is 2 + 2?", "4"), ("q3", "What is 3 + 3?", "6")]


def _mock(name: str, right: set[str]):
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    def reply(messages, tools, tool_choice, config):
        qid, _, answer = next(q for q in QUESTIONS if q[1] == messages[-1].text)
        out = ModelOutput.from_content(model=name, content=answer if qid in right else "no idea")
        out.usage = ModelUsage(input_tokens=8, output_tokens=2, total_tokens=10)  # no tokenizer download
        return out

    return get_model(f"mockllm/{name}", custom_outputs=reply)


def _task(fail: str | None = None):
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate, solver

    @solver
    def flaky():
        async def solve(state, generate):
            if state.sample_id == fail:
                raise RuntimeError("provider died")
            return state

        return solve

    samples = [Sample(id=q, input=text, target=ans) for q, text, ans in QUESTIONS]
    return Task(dataset=samples, solver=[flaky(), generate()], scorer=match(), name="arith")


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    from inspect_ai import eval as inspect_eval
    from inspect_ai import eval_set

    root = tmp_path_factory.mktemp("inspect")
    kw = {"display": "none", "max_connections": 4}
    ok, _ = eval_set([_task()], model=[_mock("alpha", {"q1"}), _mock("beta", {"q1", "q3"})],
                     log_dir=str(root / "set"), **kw)  # fmt: skip
    assert ok
    inspect_eval(_task(), model=_mock("gamma", {"q2"}), log_dir=str(root / "json"), log_format="json", **kw)
    [bad] = inspect_eval(_task(fail="q3"), model=_mock("delta", {"q1"}), log_dir=str(root / "error"), **kw)
    assert bad.status == "error"
    return root


def _rows(out: Path) -> dict[tuple[str, str], tuple[int, int]]:
    with (out / "responses.csv").open() as fh:
        return {(r["model"], r["item_id"]): (int(r["correct"]), int(r["trials"])) for r in csv.DictReader(fh)}


def _evals(logs: Path, to: Path) -> Path:
    """A folder holding only the eval set's two logs (alpha's and beta's)."""
    to.mkdir()
    for p in (logs / "set").glob("*.eval"):
        shutil.copy(p, to)
    return to


def _first(folder: Path, suffix: str = ".eval") -> Path:
    """The first log in ``folder`` (inspect names its logs <time>_<task>_<id>)."""
    return sorted(p for p in folder.iterdir() if p.suffix == suffix and p.name[:1].isdigit())[0]


# -- 1: a folder's other JSON files are not logs ----------------------------------------------------------


def test_eval_set_folder_and_an_output_inside_it_import_and_reimport(logs, tmp_path, capsys):
    folder = tmp_path / "set"
    shutil.copytree(logs / "set", folder)
    assert {"eval-set.json", "logs.json"} <= {p.name for p in folder.iterdir()}  # inspect's own manifests
    # a JSON log renamed by hand is still found by what it holds
    shutil.copy(_first(logs / "json", ".json"), folder / "gamma.json")
    out = folder / "imported"
    for _ in range(2):  # the rerun finds this import's own import.json in the folder and leaves it alone
        assert main(["import", "inspect", str(folder), "--out", str(out)]) == 0, capsys.readouterr().err
        assert "3 model(s) x 3 item(s) from 3 log(s)" in capsys.readouterr().out
    assert _rows(out)[("mockllm/beta", "arith/q3")] == (1, 1)
    # a damaged log named as inspect names its logs is still read, and reported
    (folder / "2026-01-01T00-00-00-00-00_arith_cut.json").write_text('{"version": 2, "stat')
    assert main(["import", "inspect", str(folder), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "_arith_cut.json: not a readable inspect_ai eval log" in err, err


# -- 2: an eval that did not finish ---------------------------------------------------------------------


@pytest.mark.parametrize("status", ["error", "cancelled", "started"])
def test_an_unfinished_eval_is_refused_naming_the_file(logs, tmp_path, capsys, status):
    folder = _evals(logs, tmp_path / "logs")
    if status == "error":
        bad = Path(shutil.copy(_first(logs / "error"), folder))
    else:  # inspect's own log of a finished run, marked as one stopped or still running
        log = json.loads(_first(logs / "json", ".json").read_text())
        bad = folder / f"2026-01-01T00-00-00-00-00_arith_{status}.json"
        bad.write_text(json.dumps({**log, "status": status}))
    out = tmp_path / "out"
    assert main(["import", "inspect", str(folder), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}: the eval did not finish (status {status})" in err, err
    assert not out.exists()


# -- 3: one file reached twice ----------------------------------------------------------------------------


def test_the_same_log_reached_twice_is_one_run_even_with_sum(logs, tmp_path, capsys):
    folder = _evals(logs, tmp_path / "logs")
    log = _first(folder)
    (tmp_path / "link").symlink_to(folder)
    cases = [([log, log], [log]), ([folder, tmp_path / "link", tmp_path / "link" / log.name], [folder])]
    for twice, once in cases:
        assert find_logs(twice) == find_logs(once)
        assert main(["import", "inspect", *map(str, once), "--out", str(tmp_path / "once")]) == 0
        assert main(["import", "inspect", *map(str, twice), "--sum", "--out", str(tmp_path / "twice")]) == 0
        assert "summed" not in capsys.readouterr().out
        assert _rows(tmp_path / "twice") == _rows(tmp_path / "once")
        assert json.loads((tmp_path / "twice" / "import.json").read_text())["summed"] == []


def test_merge_counts_a_source_read_twice_once(tmp_path):
    real = tmp_path / "run.eval"
    real.write_text("")
    (tmp_path / "alias.eval").symlink_to(real)

    def content(source: Path) -> LogContent:
        log = LogContent(str(source), "m", "t")
        log.records = [Record("m", "t", "t/1", 1, 1, str(source))]
        return log

    res = merge("inspect", [content(real), content(tmp_path / "alias.eval")], metric="match", threshold=None,
                sum_repeats=True)  # fmt: skip
    assert res.trials[("m", "t/1")] == 1 and not res.summed and len(res.sources) == 1


# -- 4: symlinked model folders ---------------------------------------------------------------------------


def test_symlinked_model_folders_are_followed_and_loops_are_not(logs, tmp_path, capsys):
    alpha, beta = (p for p in (logs / "set").iterdir() if p.suffix == ".eval")
    root = tmp_path / "logs"
    (root / "a").mkdir(parents=True)
    shutil.copy(alpha, root / "a")
    (tmp_path / "real-b").mkdir()
    shutil.copy(beta, tmp_path / "real-b")
    (root / "b").symlink_to(tmp_path / "real-b")
    (root / "a" / "up").symlink_to(root)  # a loop
    out = tmp_path / "out"
    assert main(["import", "inspect", str(root), "--out", str(out)]) == 0, capsys.readouterr().err
    assert "2 model(s) x 3 item(s) from 2 log(s)" in capsys.readouterr().out
    assert {m for m, _ in _rows(out)} == {"mockllm/alpha", "mockllm/beta"}


# -- 5: merge is linear in the items ----------------------------------------------------------------------


class _Id(str):
    """An item id that counts its comparisons: a list's `in` compares with every id held."""

    calls = 0
    __hash__ = str.__hash__

    def __eq__(self, other):
        _Id.calls += 1
        return str.__eq__(self, other)


def test_merge_compares_each_item_id_a_bounded_number_of_times():
    n = 2000
    log = LogContent("x.eval", "m", "t")
    log.records = [Record("m", "t", _Id(f"t/{i}"), 1, 1, "x.eval") for i in range(n)]
    _Id.calls = 0
    res = merge("inspect", [log], metric="match", threshold=None)
    assert res.item_ids[:3] == ["t/0", "t/1", "t/2"] and len(res.item_ids) == n
    assert _Id.calls < 5 * n, _Id.calls  # a list held: about n * n / 2


# -- 6: ids whose last part only looks like a number ------------------------------------------------------


def test_ids_ending_in_unicode_digits_sort_as_text(tmp_path):
    log = LogContent("x.eval", "m", "t")
    ids = ["t/²", "t/10", "t/①", "t/2", "t/٣"]
    log.records = [Record("m", "t", i, 1, 1, "x.eval") for i in ids]
    log.items = [ItemText(i, "t", {"text": i}, "x.eval") for i in ids]
    res = merge("inspect", [log], metric="match", threshold=None)
    assert res.item_ids == ["t/2", "t/10", "t/²", "t/٣", "t/①"]
    write(res, tmp_path)
    assert [r["item_id"] for r in csv.DictReader((tmp_path / "responses.csv").open(encoding="utf-8"))] == res.item_ids


# -- 7: staged files of a killed import -------------------------------------------------------------------


def _result():
    log = LogContent("x.eval", "m", "t")
    log.records = [Record("m", "t", "t/1", 1, 1, "x.eval")]
    log.items = [ItemText("t/1", "t", {"text": "q"}, "x.eval")]
    return merge("inspect", [log], metric="match", threshold=None)


def test_a_quick_rerun_sweeps_the_fresh_staged_files_of_a_killed_import(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("responses.csv", "items.jsonl", "import.json"):
        (out / f".{name}.k1ll3d.tmp").write_text("half")  # just now: an import killed a moment ago
    write(_result(), out)
    assert sorted(p.name for p in out.iterdir()) == ["import.json", "items.jsonl", "responses.csv"]


def test_a_live_import_keeps_its_staged_files_until_it_is_done(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a live import holds the folder while it writes
    live = out / ".responses.csv.l1ve.tmp"
    live.write_text("being written")
    done = threading.Thread(target=write, args=(_result(), out))
    done.start()
    time.sleep(0.5)
    assert done.is_alive() and live.exists() and not (out / "responses.csv").exists()
    live.rename(out / "responses.csv")  # the live import renames, then lets go
    os.close(fd)
    done.join(10)
    assert not done.is_alive()
    assert sorted(p.name for p in out.iterdir()) == ["import.json", "items.jsonl", "responses.csv"]
    assert (out / "responses.csv").read_text().startswith("model,item_id")


def test_a_sample_twice_in_one_log_is_refused_not_counted_as_a_trial(logs, tmp_path, capsys):
    # a JSON log edited or merged by hand: the repeated answer had been imported as one more trial than ran
    log = json.loads(_first(logs / "json", ".json").read_text())
    log["samples"].append(log["samples"][0])
    folder = tmp_path / "logs"
    folder.mkdir()
    bad = folder / "2026-01-01T00-00-00-00-00_arith_dup.json"
    bad.write_text(json.dumps(log))
    out = tmp_path / "out"
    assert main(["import", "inspect", str(folder), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    first = log["samples"][0]
    assert err.count("\n") == 1 and f"sample {first['id']} epoch {first['epoch']}: appears twice in one log" in err, err
    assert not out.exists()


# -- invalidated samples, a scorer of several values, two setups of one model -----------------------------


def test_a_log_with_invalidated_samples_is_refused_as_inspect_counts_it_unfinished(logs, tmp_path, capsys):
    # inspect's invalidate_samples (a reward hack found after the eval): the samples had counted as trials
    import datetime

    from inspect_ai.log import ProvenanceData, invalidate_samples, read_eval_log, write_eval_log

    log = read_eval_log(str(_first(logs / "json", ".json")))
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    bad = invalidate_samples(log, [s.uuid for s in log.samples if s.id == "q1"],
                             ProvenanceData(timestamp=when, author="qa", reason="reward hack"))  # fmt: skip
    folder = tmp_path / "logs"
    folder.mkdir()
    write_eval_log(bad, str(folder / "2026-01-01T00-00-00-00-00_arith_inv.eval"))
    err = capsys.readouterr().err if main(["import", "inspect", str(folder), "--out", str(tmp_path / "o")]) == 2 else "rc 0"
    assert err.count("\n") == 1 and "_arith_inv.eval: 1 sample(s) invalidated (reward hack)" in err, err
    assert not (tmp_path / "o").exists()


def test_a_scorer_of_several_values_is_read_one_key_at_a_time(tmp_path, capsys):
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import Score, mean, scorer

    @scorer(metrics={"exact": [mean()], "contains": [mean()]})
    def dictscore():
        async def score(state, target):
            said = state.output.completion
            return Score(value={"exact": int(said == target.text), "contains": int(target.text in said + "2")})

        return score

    task = Task(dataset=[Sample(id=q, input=t, target=a) for q, t, a in QUESTIONS], scorer=dictscore(), name="arith")
    inspect_eval(task, model=_mock("alpha", {"q1"}), log_dir=str(tmp_path / "logs"), display="none")
    # inspect logs the first score as "exact" (of scorer dictscore): the default reads that key
    for metric, want in ((None, {"q1": 1, "q2": 0, "q3": 0}), ("dictscore/contains", {"q1": 1, "q2": 0, "q3": 0}),
                         ("contains", {"q1": 1, "q2": 0, "q3": 0})):  # fmt: skip
        out = tmp_path / f"o-{metric}"
        assert main(["import", "inspect", str(tmp_path / "logs"), "--out", str(out),
                     *(["--metric", metric] if metric else [])]) == 0, capsys.readouterr().err  # fmt: skip
        assert {i.split("/")[1]: c for (_, i), (c, _) in _rows(out).items()} == want, metric
        assert json.loads((out / "import.json").read_text())["metric"] == (metric if metric and "/" in metric
                                                                          else f"dictscore/{metric or 'exact'}")
    assert main(["import", "inspect", str(tmp_path / "logs"), "--out", str(tmp_path / "x"), "--metric", "dictscore"]) == 2
    err = capsys.readouterr().err
    assert "scorer 'dictscore' gives one value per key ('exact', 'contains'); choose one with --metric dictscore/KEY" in err
    assert main(["import", "inspect", str(tmp_path / "logs"), "--out", str(tmp_path / "x"), "--metric",
                 "dictscore/nope"]) == 2  # fmt: skip
    assert "scorer 'dictscore' gives no value 'nope' (keys 'exact', 'contains')" in capsys.readouterr().err


def test_two_runs_of_one_model_with_other_task_arguments_are_not_summed(logs, tmp_path, capsys):
    log = json.loads(_first(logs / "json", ".json").read_text())
    folder = tmp_path / "logs"
    folder.mkdir()
    for n, args in enumerate(({"cot": False}, {"cot": True})):
        (folder / f"2026-01-01T00-00-0{n}-00-00_arith_{n}.json").write_text(
            json.dumps({**log, "eval": {**log["eval"], "task_args": args}}))
    assert main(["import", "inspect", str(folder), "--out", str(tmp_path / "o"), "--sum"]) == 2
    err = capsys.readouterr().err
    assert "run otherwise than in" in err and '(task_args {"cot": true} against task_args {"cot": false})' in err, err
    same = tmp_path / "same"
    same.mkdir()
    for n in range(2):  # the same arguments twice are repeats, which --sum adds
        (same / f"2026-01-01T00-00-0{n}-00-00_arith_{n}.json").write_text(
            json.dumps({**log, "eval": {**log["eval"], "task_args": {"cot": True}}}))
    assert main(["import", "inspect", str(same), "--out", str(tmp_path / "s"), "--sum"]) == 0
    assert set(t for _, t in _rows(tmp_path / "s").values()) == {2}
