"""Peak memory of ``benchfill import lm-eval`` on logs of the size real multiple-choice suites write.

A 5-shot multiple-choice task (MMLU's shape) logs one loglikelihood request per choice, each with the
whole few-shot prompt, so a line runs to ~10 KB and one model's samples file to hundreds of MB. The
logs are made here from the shape of the committed lm-eval fixture (tests/fixtures/lm_eval, made by
lm-eval itself), in a temp folder, and each import runs in a fresh process whose peak RSS is read back.

Two settings side by side:
- one model, one large samples file;
- eight models, a file each of the same documents (the texts repeat in every model's log).
Printed per setting: the logs' size, the import's peak RSS above the interpreter's own, and that peak
over the largest file's size and over the total. Reading one line at a time, the peak should follow
the distinct items' texts (what items.jsonl holds), not the sum of the files.

Then an inspect_ai ``.eval`` log (made here by inspect's own eval() with its mockllm provider, as the
tests make theirs): 1,000 samples whose answers run to 20 KB, read by inspect's ``read_eval_log`` in
full beside benchfill's import of it, each in a fresh process.

    nice -n 10 .venv/bin/python bench/bench_import.py [--docs 14000] [--prompt-kb 2.5] [--inspect-samples 1000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIME = "2026-11-30T00-00-00.000000"
CHOICES = ("A", "B", "C", "D")

PROBE = """
import resource, sys, time
from benchfill.importers import import_logs, write
if sys.argv[3] == "inspect":  # its modules loaded before the base, as in the full read's process
    import inspect_ai.log, inspect_ai.scorer
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
result = import_logs(sys.argv[3], [sys.argv[1]])
write(result, sys.argv[2])
print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter() - t, len(result.item_ids),
      len(result.models))
"""


INSPECT_LOG = """
import sys
from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import match
from inspect_ai.solver import generate
n, answer = int(sys.argv[1]), "step " * 4096 + "7"  # a 20 KB chain of thought before the answer


def reply(messages, tools, tool_choice, config):
    out = ModelOutput.from_content(model="m", content=answer)
    out.usage = ModelUsage(input_tokens=8, output_tokens=2, total_tokens=10)  # no tokenizer download
    return out


samples = [Sample(id=f"q{i}", input=f"What is {i} + 3? " + "context " * 100, target=str(i + 3)) for i in range(n)]
inspect_eval(Task(dataset=samples, solver=generate(), scorer=match(), name="arith"),
             model=get_model("mockllm/m", custom_outputs=reply), log_dir=sys.argv[2], log_format="eval",
             display="none", max_connections=64)
"""

FULL_READ = """
import resource, sys, time
from inspect_ai.log import read_eval_log
import inspect_ai.scorer
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
log = read_eval_log(sys.argv[1])
print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter() - t, len(log.samples), 1)
"""


def make_logs(folder: Path, models: int, docs: int, prompt_kb: float) -> list[Path]:
    """``models`` lm-eval output folders, each one samples file of ``docs`` four-choice documents."""
    shots = "x" * int(prompt_kb * 1024)  # the few-shot preamble every request repeats
    files = []
    for m in range(models):
        out = folder / f"model-{m}"
        out.mkdir(parents=True)
        config = {"task": "mc", "output_type": "multiple_choice", "doc_to_text": "{{question}}", "num_fewshot": 5}
        results = {"results": {"mc": {"acc,none": 0.5}}, "configs": {"mc": config},
                   "config": {"model": "hf", "model_args": f"pretrained=org/model-{m}"},
                   "model_name": f"org/model-{m}", "n-samples": {"mc": {"original": docs, "effective": docs}}}  # fmt: skip
        (out / f"results_{TIME}.json").write_text(json.dumps(results), encoding="utf-8")
        path = out / f"samples_mc_{TIME}.jsonl"
        with path.open("w", encoding="utf-8") as fh:
            for d in range(docs):
                question = f"Question {d}: which of these holds for case {d * 7919 % 10007}?"
                prompt = f"{shots}\n\n{question}\nAnswer:"
                args = {f"gen_args_{c}": {"arg_0": prompt, "arg_1": f" {CHOICES[c]}"} for c in range(4)}
                right = (d * 31 + m) % 4
                sample = {"doc_id": d, "doc": {"question": question, "choices": list(CHOICES), "answer": d % 4},
                          "target": str(d % 4), "arguments": args,
                          "resps": [[[-1.5 - c, False]] for c in range(4)],
                          "filtered_resps": [[-1.5 - c, False] for c in range(4)], "filter": "none",
                          "metrics": ["acc"], "doc_hash": "0" * 64, "prompt_hash": "1" * 64, "target_hash": "2" * 64,
                          "acc": 1.0 if right == d % 4 else 0.0}  # fmt: skip
                fh.write(json.dumps(sample) + "\n")
        files.append(path)
    return files


def measure(logs: Path, out: Path, probe: str = PROBE, tool: str = "lm-eval") -> tuple[float, float, int, int]:
    """(peak MB above the interpreter's start, seconds, items, models) of one import in a fresh process."""
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT), "HOME": str(out.parent)}
    line = subprocess.run([sys.executable, "-c", probe, str(logs), str(out), tool], check=True, capture_output=True,
                          text=True, env=env).stdout.split()  # fmt: skip
    base, peak, seconds, items, models = float(line[0]), float(line[1]), float(line[2]), int(line[3]), int(line[4])
    return (peak - base) / 1024, seconds, items, models  # ru_maxrss is in KB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=14000, help="documents of the large file (MMLU: 14,042)")
    ap.add_argument("--prompt-kb", type=float, default=2.5, help="the few-shot prompt's size, KB")
    ap.add_argument("--inspect-samples", type=int, default=1000, help="samples of the inspect log (0: none)")
    args = ap.parse_args()
    print(f"{'setting':<28}{'logs MB':>9}{'largest MB':>12}{'peak MB':>9}{'/largest':>10}{'/total':>8}"
          f"{'items':>7}{'s':>7}")
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        for name, models, docs in (("one model, one file", 1, args.docs),
                                   ("eight models, same items", 8, args.docs)):  # fmt: skip
            folder = Path(tmp) / name.split(",")[0].replace(" ", "-")
            t = time.perf_counter()
            files = make_logs(folder / "logs", models, docs, args.prompt_kb)
            made = time.perf_counter() - t
            sizes = [f.stat().st_size / 2**20 for f in files]
            peak, seconds, items, got = measure(folder / "logs", folder / "out")
            assert got == models
            print(f"{name:<28}{sum(sizes):>9.0f}{max(sizes):>12.0f}{peak:>9.0f}{peak / max(sizes):>10.2f}"
                  f"{peak / sum(sizes):>8.2f}{items:>7}{seconds:>7.1f}   (logs made in {made:.0f} s)")
            for f in files:  # the next setting's logs need the room
                f.unlink()
        if args.inspect_samples:
            folder = Path(tmp) / "inspect"
            t = time.perf_counter()
            env = {"HOME": str(folder), "XDG_DATA_HOME": str(folder / "data"), "PATH": "/usr/bin:/bin"}
            subprocess.run([sys.executable, "-c", INSPECT_LOG, str(args.inspect_samples), str(folder / "logs")],
                           check=True, capture_output=True, env=env)  # fmt: skip
            made = time.perf_counter() - t
            log = next((folder / "logs").glob("*.eval"))
            size = log.stat().st_size / 2**20
            for name, probe in (("inspect: read_eval_log", FULL_READ), ("inspect: benchfill import", PROBE)):
                arg = log if probe is FULL_READ else folder / "logs"
                peak, seconds, items, _ = measure(arg, folder / f"out-{len(name)}", probe, "inspect")
                print(f"{name:<28}{size:>9.1f}{size:>12.1f}{peak:>9.0f}{'':>10}{'':>8}{items:>7}{seconds:>7.1f}"
                      f"   (log made in {made:.0f} s; its size compressed)")
    print("peak: the import's peak RSS above the interpreter's own; /largest and /total: over the largest "
          "samples file's size and over all of them")


if __name__ == "__main__":
    main()
