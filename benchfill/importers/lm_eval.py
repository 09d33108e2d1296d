"""lm-eval-harness logs: the per-sample files of ``--log_samples`` and the results file beside them.

``lm_eval --output_path OUT --log_samples`` writes, per model, ``OUT/<model>/results_<time>.json``
(the model's name, each task's config) and one ``samples_<task>_<time>.jsonl`` per task: one JSON
object per document and filter with ``doc_id``, ``doc``, ``target``, ``arguments`` (the prompt),
``filtered_resps``, ``filter`` and one key per metric. With ``--output_path OUT/NAME.json`` (lm-eval >=
0.4.9) the results file is ``OUT/NAME_<time>.json`` and the samples lie beside it. lm-eval 0.4.3-0.4.6
wrote no ``metrics`` and ``filter`` keys: the metrics are then the keys lm-eval adds to its own, and the
filter is the task's only one. The file format is read as lm-eval writes it; lm-eval itself (which
pulls torch) is never imported.

Filters: a task with several (gsm8k: strict-match, flexible-extract) logs each document once per
filter; one must be chosen (``--filter NAME``, or ``--metric METRIC,NAME`` as lm-eval's results file
names a metric under a filter).

Repeats: a generative task with ``repeats: R`` whose metric saw all R responses of a document (its
filter keeps them, e.g. ``take_first_k`` with k = R) logs the share of correct repeats; that share times
R becomes ``correct`` of R trials. With lm-eval's default filter (``take_first``), and always for
loglikelihood and multiple-choice tasks, only the first response is scored, so each document is one
trial. A graded score whose values happen to fall on the k/R grid would be read as such a share: give
``--threshold`` to treat the metric as graded (then each document is one trial, correct when its score
reaches the threshold). Item ids are ``<task>/<doc_id>``.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from benchfill.data import loads_json
from benchfill.errors import DataError
from benchfill.importers.files import find_files
from benchfill.importers.matrix import ItemText, LogContent, Record, score

SAMPLES = re.compile(r"^samples_(?P<task>.+)_(?P<time>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl(?:\.gz)?$")
# either layout's results file: results_<time>.json, or NAME_<time>.json of --output_path NAME.json
RESULTS = re.compile(r"^.+_(?P<time>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.json$")
DEFAULT_METRICS = ("acc", "exact_match")  # the first one a sample carries is the default
# The keys lm-eval writes on every sample; lm-eval 0.4.3-0.4.6 named no metrics, so there the other keys are they.
LOGGED = frozenset({"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
                    "doc_hash", "prompt_hash", "target_hash"})  # fmt: skip
# With a model's own chat template the logged prompt differs per model; what the task asks is then these
# config keys (and the run's system instruction) applied to the document.
PROMPT_KEYS = ("doc_to_text", "description", "num_fewshot", "gen_prefix")


def find_logs(paths: list[str | Path]) -> list[Path]:
    """Samples files named directly or found under the directories named, each file once, gzipped too. A
    file beside its own gzipped copy is one log (read twice, ``--sum`` had doubled its trials)."""
    samples = find_files(paths, lambda q: SAMPLES.match(q.name) is not None)
    plain = {q.resolve() for q in samples if not q.name.endswith(".gz")}
    return [q for q in samples if not (q.name.endswith(".gz") and q.resolve().with_suffix("") in plain)]


def unsampled(paths: list[str | Path], samples: list[Path], task: str | Collection[str] | None = None) -> list[str]:
    """A line for each results file under the folders named with a task (``task``, where one is chosen)
    whose samples file is not beside it and that no other log holds for its model: that model was run
    without ``--log_samples``, its samples were moved, or lm-eval stopped (or failed to write, which it only
    warns of) before that task's file; importing the rest would leave the model out of the matrix without a
    word. A results file of a model and task whose samples another run of it logged is no loss, and passed
    over. Both layouts are searched: ``results_<time>.json`` and, for ``--output_path NAME.json``,
    ``NAME_<time>.json``."""
    folders = [p for p in paths if Path(p).is_dir()]
    results = find_files(folders, lambda q: RESULTS.match(q.name) is not None) if folders else []
    covered: set[tuple[str, str]] = set()
    for q in samples:
        m = SAMPLES.match(q.name)
        if m is None:  # a file named directly that is no samples file: read_log names it
            continue
        try:
            model = _model_of(_results_path(q, m["time"]))[1]
        except DataError:  # read_log names what is wrong with it
            continue
        if model is not None:  # a model is its name and its weights: two checkpoints share a name
            covered.add((*model, m["task"]))
    out = []
    for q in results:
        time = RESULTS.match(q.name)["time"]
        data, model = _model_of(q)
        if model is None:  # not a results file lm-eval wrote: nothing of a model is lost
            continue
        # the samples beside it, task by task: lm-eval writes one file per task after the results file,
        # so a run stopped (or a write that failed) midway has some tasks' files and not the others'
        beside = {m["task"] for x in q.parent.glob(f"samples_*_{time}.jsonl*") if (m := SAMPLES.match(x.name))}
        tasks = _tasks(data) - beside
        wanted = None if task is None else {task} if isinstance(task, str) else set(task)
        lost = sorted(t for t in tasks if (wanted is None or t in wanted) and (*model, t) not in covered)
        if lost:
            who = f"{model[0]} ({model[1]})" if model[1] else model[0]
            out.append(f"{q}: no samples_<task>_{time}.jsonl beside it for {', '.join(lost)}, and no other log "
                       f"holds model {who} on {', '.join(lost)}: that run was made without lm_eval --log_samples, stopped "
                       "before writing those samples, or its samples were moved; the model would be left out "
                       "(move the results file away, or choose another --task, to import the rest)")
    return out


def _tasks(results: dict[str, Any]) -> set[str]:
    """The tasks a results file ran, groups left out: a group (mmlu) is scored as its subtasks'
    aggregate and logs no samples of its own (lm-eval's ``group_subtasks`` and ``groups`` name them)."""
    tasks = {t for part in ("configs", "results") if isinstance(results.get(part), dict) for t in results[part]}
    return tasks - set(groups(results))


def groups(results: dict[str, Any]) -> dict[str, list[str]]:
    """The groups a results file names, each with its subtasks (a leaf task maps to [] there)."""
    sub = results.get("group_subtasks")
    out = {g: [str(t) for t in ts] for g, ts in sub.items() if isinstance(ts, list) and ts} if isinstance(sub, dict) else {}
    named = results.get("groups")
    for g in named if isinstance(named, dict) else ():
        out.setdefault(g, [])
    return out


def group_subtasks(paths: list[str | Path], task: str) -> list[str] | None:
    """Where ``task`` is a group (mmlu) in a results file under the paths named (folders, or samples files
    beside their results files): its leaf tasks, a group within it expanded (mmlu -> mmlu_stem ->
    mmlu_anatomy), as lm-eval's ``group_subtasks`` lists them; else None."""
    found: dict[str, list[str]] = {}
    folders = {Path(p) if Path(p).is_dir() else Path(p).parent for p in paths}
    for q in find_files(sorted(folders), lambda q: RESULTS.match(q.name) is not None):
        for g, subs in groups(_model_of(q)[0]).items():
            found.setdefault(g, [])
            found[g] += [t for t in subs if t not in found[g]]
    if not found.get(task):
        return None
    leaves: list[str] = []
    todo, seen = list(found[task]), {task}
    while todo:
        t = todo.pop(0)
        if t in seen:
            continue
        seen.add(t)
        if found.get(t):
            todo = found[t] + todo
        elif t not in leaves:
            leaves.append(t)
    return leaves or None


def task_of(path: Path) -> str | None:
    m = SAMPLES.match(path.name)
    return m["task"] if m else None


def read_log(path: Path, *, metric: str | None, threshold: float | None) -> tuple[LogContent, str]:
    """One samples file and the model name from its results file; returns the content and the metric used.

    ``metric`` may name a filter as lm-eval's results file does, ``METRIC,FILTER`` (either part may be
    empty); the metric returned then names it too.
    """
    m = SAMPLES.match(path.name)
    if not m:
        raise DataError(f"{path}: not an lm-eval-harness samples file (lm_eval --log_samples writes "
                        f"samples_<task>_<time>.jsonl)")  # fmt: skip
    task = m["task"]
    results_path = _results_path(path, m["time"])
    try:
        # utf-8-sig: a results file saved with a byte-order mark (as the samples files are read) is still one
        results = loads_json(results_path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise DataError(f"{path}: no {results_path.name} beside it (lm-eval writes the model's name there)") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{results_path}: not a readable lm-eval results file ({exc.__class__.__name__})") from None
    if not isinstance(results, dict):
        raise DataError(f"{results_path}: not an lm-eval results file (a JSON object was expected)")
    model = _model_name(results, results_path)
    configs = results.get("configs") or {}
    config = (configs.get(task) if isinstance(configs, dict) else None) or {}
    config = config if isinstance(config, dict) else {}
    repeats = config.get("repeats")
    if repeats is None:
        repeats = 1
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise DataError(f"{results_path}: configs.{task}.repeats must be a positive integer, found {repeats!r}")
    # Only a generative task's filter can keep several responses per request: a loglikelihood or multiple-
    # choice request's filtered response is one [loglik, is_greedy] pair, whose length 2 is no repeat count.
    per_response = config.get("output_type", "generate_until") == "generate_until"
    # What makes an item the same item in every model's log: its document and the task's prompt settings,
    # not the logged prompt, which a model's own chat template renders (--apply_chat_template)
    recipe = {k: config.get(k) for k in PROMPT_KEYS}
    name, _, wanted = (metric or "").partition(",")
    cfg = results.get("config")
    settings = _weights(cfg.get("model_args") if isinstance(cfg, dict) else None)
    log = LogContent(source=str(path), model=model, task=task, settings=settings)
    reader = _Samples(path, task, model, repeats if per_response else 1, threshold, recipe, log, name or None,
                      wanted or None)  # fmt: skip
    try:
        chosen, used = reader.read(config)
    except UnicodeDecodeError:
        raise DataError(f"{path}: not a UTF-8 text file") from None
    except (OSError, EOFError) as exc:  # a gzipped log cut short, or not gzip at all
        raise DataError(f"{path}: not a readable gzip file ({exc.__class__.__name__})") from None
    _check_complete(path, results, results_path, task, len(log.records), chosen)
    used = f"{used},{chosen}" if wanted else used
    scored = max(r.trials for r in log.records)
    log.scoring = (f"{used}: share of {scored} scored repeats x {scored}" if scored > 1
                   else f"{used}: one scored response per document" + (f" (of {repeats} repeats)" if repeats > 1 else ""))  # fmt: skip
    if threshold is not None:
        log.scoring = f"{used} >= {threshold}: one trial per document"
    return log, used


def _results_path(path: Path, time: str) -> Path:
    """The results file of a samples file: ``results_<time>.json`` beside it, or, as lm-eval >= 0.4.9 writes
    it for ``--output_path NAME.json``, the one ``NAME_<time>.json`` beside it."""
    beside = path.with_name(f"results_{time}.json")
    if beside.exists():
        return beside
    named = sorted(path.parent.glob(f"*_{time}.json"))
    if len(named) > 1:
        raise DataError(f"{path}: several results files of its time beside it ({named[0].name}, {named[1].name})")
    if not named:
        raise DataError(f"{path}: no results_{time}.json beside it, nor a NAME_{time}.json of --output_path "
                        f"NAME.json (lm-eval writes the model's name there)")  # fmt: skip
    return named[0]


def _only_filter(path: Path, task: str, config: dict[str, Any]) -> str:
    """The filter of a sample that does not name it (lm-eval before 0.4.7): the task's only one. Of
    several, lm-eval logged each document once per filter, in an order no line records (with several
    processes, each one's share in turn), so the lines cannot be told apart."""
    listed = config.get("filter_list")
    names = [f.get("name") for f in listed if isinstance(f, dict)] if isinstance(listed, list) else []
    if len(names) > 1:
        raise DataError(f"{path}: written by an lm-eval before 0.4.7, whose samples do not say which filter scored "
                        f"them, and task {task} has {len(names)} filters ({', '.join(map(str, names))}); "
                        f"rerun it with lm-eval >= 0.4.7")  # fmt: skip
    return str(names[0]) if names and names[0] else "none"  # lm-eval's name for its default filter


def _check_complete(path: Path, results: dict[str, Any], results_path: Path, task: str, docs: int, filt: str) -> None:
    """A killed lm-eval leaves a samples file cut at a line, after the results file that counts the
    documents was written (``--limit`` counts only those it ran; lm-eval >= 0.4.12 counts the values of one
    metric, which a task may leave out for some documents, so only fewer documents are refused); a log
    without that count is not checked."""
    counts = results.get("n-samples")
    counts = counts.get(task) if isinstance(counts, dict) else None
    n = counts.get("effective") if isinstance(counts, dict) else None
    if isinstance(n, int) and not isinstance(n, bool) and docs < n:
        raise DataError(f"{path}: {docs} document(s) under filter {filt}, but {results_path.name} counts {n} "
                        f"(n-samples.effective): an incomplete log (a killed run?)")  # fmt: skip


class _Samples:
    """One samples file read a line at a time into ``log``: only the chosen filter's samples are kept, and
    only what the matrix and items.jsonl need of them (a 5-shot multiple-choice line, its prompt once per
    choice, runs to ~10 KB; holding every parsed line until the end had the import peak at twice the file's
    size). The filter is the one asked for, else the file's only one, which is known only at its end: the
    first filter's samples are taken as they come, and a second filter without --filter is an error."""

    def __init__(self, path: Path, task: str, model: str, repeats: int, threshold: float | None,
                 recipe: dict[str, Any], log: LogContent, used: str | None, wanted: str | None) -> None:  # fmt: skip
        self.path, self.task, self.model, self.repeats, self.threshold = path, task, model, repeats, threshold
        self.recipe, self.log, self.used, self.wanted = recipe, log, used, wanted
        self.seen: set[int] = set()

    def read(self, config: dict[str, Any]) -> tuple[str, str]:
        """Every line of the file; returns (the filter chosen, the metric used)."""
        path = self.path
        filters: dict[str, None] = {}  # in order of first appearance
        chosen = self.wanted
        # utf-8-sig: a BOM (an editor's save) is dropped, where it had made line 1 "not valid JSON"
        opened = gzip.open(path, "rt", encoding="utf-8-sig") if path.name.endswith(".gz") else path.open(encoding="utf-8-sig")
        with opened as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    sample = loads_json(line)
                except json.JSONDecodeError:
                    raise DataError(f"{path} line {n}: not valid JSON (a truncated log?)") from None
                # lm-eval 0.4.3-0.4.6 wrote neither "metrics" nor "filter", but always "filtered_resps"
                if not isinstance(sample, dict) or "doc_id" not in sample or not ({"metrics", "filtered_resps"} & set(sample)):
                    raise DataError(f"{path} line {n}: not an lm-eval sample (no doc_id/metrics)")
                if "filter" in sample:
                    filt = sample["filter"]
                    if not isinstance(filt, str) or not filt:
                        raise DataError(f"{path} line {n}: field 'filter' must be a filter's name, found {json.dumps(filt)}")
                else:
                    filt = _only_filter(path, self.task, config)
                filters.setdefault(filt)
                if chosen is None:
                    chosen = filt
                if filt == chosen and (self.wanted is not None or len(filters) == 1):
                    self.take(n, sample)
        if not filters:
            raise DataError(f"{path}: no samples (an empty or truncated log)")
        if self.wanted is not None and self.wanted not in filters:
            raise DataError(f"{path}: no filter {self.wanted!r} (the log has {', '.join(map(repr, filters))})")
        if self.wanted is None and len(filters) > 1:
            raise DataError(f"{path}: each document is scored under {len(filters)} filters ({', '.join(map(repr, filters))}); "
                            f"choose one with --filter NAME")  # fmt: skip
        assert chosen is not None and self.used is not None  # a sample of the chosen filter was taken
        return chosen, self.used

    def take(self, n: int, sample: dict[str, Any]) -> None:
        """One sample of the chosen filter into the log's records and item texts; the metric ``used`` is
        found on the first one when none was asked for."""
        path = self.path
        if "metrics" in sample:
            names = sample["metrics"]
            if not isinstance(names, list) or not names or not all(isinstance(x, str) for x in names):
                raise DataError(f"{path} line {n}: field 'metrics' must be a non-empty list of metric names")
        else:
            names = [k for k in sample if k not in LOGGED]
            if not names:
                raise DataError(f"{path} line {n}: no metric values (and no 'metrics' field)")
        if self.used is None:
            self.used = next((x for x in DEFAULT_METRICS if x in names), None) or names[0]
        used = self.used
        if used not in sample:
            raise DataError(f"{path} line {n}: no metric {used!r} (the log has {', '.join(map(repr, names))})")
        doc_id = sample["doc_id"]
        # ASCII digits only: str.isdigit() also holds for "²", which int() refuses
        if isinstance(doc_id, str) and doc_id.strip().isascii() and doc_id.strip().isdigit():
            doc_id = int(doc_id)
        if isinstance(doc_id, bool) or not isinstance(doc_id, int):
            raise DataError(f"{path} line {n}: field 'doc_id' must be an integer, found {json.dumps(doc_id, ensure_ascii=False)}")
        if doc_id in self.seen:
            raise DataError(f"{path} line {n}: doc_id {doc_id} twice in one log")
        self.seen.add(doc_id)
        item_id = f"{self.task}/{doc_id}"
        correct, trials = _count(sample, used, self.repeats, self.threshold, f"{path} line {n}", self.log)
        self.log.records.append(Record(self.model, self.task, item_id, correct, trials, str(path)))
        self.log.items.append(ItemText(item_id, self.task, _item_fields(sample, self.task, self.recipe), str(path)))


def _count(sample: dict[str, Any], metric: str, repeats: int, threshold: float | None, where: str,
           log: LogContent | None = None) -> tuple[int, int]:  # fmt: skip
    value = sample[metric]
    filtered = sample.get("filtered_resps")
    if filtered is None:
        filtered = []
    if not isinstance(filtered, list):  # lm-eval writes a list (each request's responses); it counts the repeats
        raise DataError(f"{where}: field 'filtered_resps' must be a list, found {_shown(filtered)}")
    seen = len(filtered[0]) if repeats > 1 and filtered and isinstance(filtered[0], list) else 1
    if threshold is None and seen > 1 and isinstance(value, (int, float)) and not isinstance(value, bool):
        at = re.fullmatch(r"pass@(\d+)", metric.split(",")[0])
        if at and int(at[1]) > 1:  # the chance that one of k passes: 1.0 for one right of ten is no share
            has = sample.get("metrics") if isinstance(sample.get("metrics"), list) else [k for k in sample if k not in LOGGED]
            share = [str(x) for x in has if not re.fullmatch(r"pass@(\d+)", str(x).split(",")[0]) or str(x).split(",")[0] == "pass@1"]
            other = (f"import one of the log's other metrics ({', '.join(share)})" if share
                     else f"the log has no other metric ({', '.join(map(str, has))})")
            raise DataError(f"{where}: metric {metric!r} is the chance that one of {at[1]} responses passes, "
                            f"not a share of the {seen} repeats; {other}, or pass --threshold T to count "
                            "a document whose score reaches T as one correct trial")
        k = value * seen
        if abs(k - round(k)) < 1e-6 and 0 <= round(k) <= seen:
            return int(round(k)), seen
        raise DataError(f"{where}: metric {metric!r} ({value}) is not a share of the {seen} repeats; "
                        f"pass --threshold T to count a score >= T as correct")  # fmt: skip
    return score(value, metric, threshold, where, log), 1


def _item_fields(sample: dict[str, Any], task: str, recipe: dict[str, Any]) -> dict[str, Any]:
    """What the item asks and expects. ``identity`` (the document and the task's prompt settings,
    ``recipe``) is the same for every model, whatever chat template rendered its prompt: logs of one item
    id that differ there, or in the target or choices, are refused. ``text`` is the logged prompt (the
    first log's, where templates differ)."""
    args = sample.get("arguments") or {}
    firsts = [a for _, a in sorted(args.items(), key=lambda kv: _arg_index(kv[0]))] if isinstance(args, dict) else []
    text = firsts[0].get("arg_0") if firsts and isinstance(firsts[0], dict) else None
    target = sample.get("target")
    # lm-eval >= 0.4.4 logs the target as str(target); earlier ones as it was (0, not "0")
    fields: dict[str, Any] = {"task": task, "text": text, "target": target if target is None else str(target)}
    # multiple choice: one loglikelihood request per choice, the continuation is the choice
    conts = [a.get("arg_1") for a in firsts if isinstance(a, dict)]
    if len(conts) > 1 and all(isinstance(c, str) for c in conts):
        fields["choices"] = [c.strip() for c in conts]
        letter = _answer_letter(target, fields["choices"])
        if letter is not None:
            fields["answer"] = letter
    fields["doc"] = sample.get("doc")
    if fields["doc"] is not None:
        fields["identity"] = json.dumps({"doc": fields["doc"], "prompt": recipe}, sort_keys=True, ensure_ascii=False,
                                        default=str)
    return fields


def _answer_letter(target: Any, choices: list[str]) -> str | None:
    """The option letter of a multiple-choice target, which the multiple_choice grader and the rewriter's
    prompts read: lm-eval logs the answer's index ("0", as str(0) since 0.4.4), or the answer's text or
    letter where the task's doc_to_target gives one. None where none of these reads unambiguously."""
    letters = "ABCDEFGHIJ"  # the multiple_choice grader's ten
    if isinstance(target, bool) or target is None or len(choices) > len(letters):
        return None
    t = str(target).strip()
    if t.isascii() and t.isdigit():  # an index, never an option's text: "4" of 4 options is no answer
        # "2" of ["1", "2", "3"] logged as text: an index or an option's text, unclear (a JSON number, as lm-eval
        # before 0.4.4 logged it, is an index)
        if isinstance(target, str) and t in choices and choices.index(t) != int(t):
            return None
        return letters[int(t)] if int(t) < len(choices) else None
    if len(t) == 1 and t in letters[:len(choices)]:
        return t
    same = [k for k, c in enumerate(choices) if c == t]
    return letters[same[0]] if len(same) == 1 else None


def _arg_index(key: str) -> int:
    """The N of an lm-eval request key "gen_args_N"; a key without one sorts last."""
    tail = key.rsplit("_", 1)[-1]
    return int(tail) if tail.isascii() and tail.isdigit() else 1 << 30


def _model_of(results: Path) -> tuple[dict[str, Any], tuple[str, str] | None]:
    """A results file's content, and the model it names with the weights it loaded (``_weights``), or None
    where it is no results file lm-eval wrote (read_log says why)."""
    try:
        data = loads_json(results.read_text(encoding="utf-8-sig"))
        if not isinstance(data, dict):
            return {}, None
        cfg = data.get("config")
        return data, (_model_name(data, results), _weights(cfg.get("model_args") if isinstance(cfg, dict) else None))
    except (DataError, OSError, ValueError):
        return {}, None


# the model_args that pick the weights: HF's checkpoint, its revision or subfolder, an adapter or delta,
# a GGUF file, a quantized load (GPTQ, bitsandbytes, vLLM's quantization), the dtype
WEIGHT_ARGS = ("pretrained", "revision", "subfolder", "peft", "delta", "gguf_file", "autogptq", "gptqmodel",
               "load_in_8bit", "load_in_4bit", "quantization", "dtype")


def _weights(args: Any) -> str:
    """Which weights a run loaded, from lm-eval's ``model_args`` (``"pretrained=m,revision=r"``, or a dict in
    later versions): the keys that pick them, in one order. A device or batch size is not another model."""
    if isinstance(args, str):
        pairs = [a.split("=", 1) for a in args.split(",") if "=" in a]
        args = {k.strip(): v.strip() for k, v in pairs}
    if not isinstance(args, dict):
        return ""
    picked = {k: str(args[k]) for k in WEIGHT_ARGS if args.get(k) not in (None, "")}
    return ", ".join(f"{k}={v}" for k, v in picked.items())


def _model_name(results: dict[str, Any], path: Path) -> str:
    name = results.get("model_name")
    if name:
        if not isinstance(name, str):
            raise DataError(f"{path}: field 'model_name' must be a string, found {_shown(name)}")
        return name
    cfg = results.get("config") or {}
    # a results file is edited or written by other tools too: a field of another type is named, not a traceback
    if not isinstance(cfg, dict):
        raise DataError(f"{path}: field 'config' must be an object (lm-eval's run settings), found {_shown(cfg)}")
    if not cfg.get("model"):
        raise DataError(f"{path}: no model_name or config.model; not an lm-eval results file")
    if not isinstance(cfg["model"], str):
        raise DataError(f"{path}: field 'config.model' must be a string, found {_shown(cfg['model'])}")
    args = cfg.get("model_args")
    return f"{cfg['model']}({args})" if args else cfg["model"]


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)[:60]
