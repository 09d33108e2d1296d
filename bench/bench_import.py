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

    nice -n 10 .venv/bin/python bench/bench_import.py [--docs 14000] [--prompt-kb 2.5]
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
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
result = import_logs("lm-eval", [sys.argv[1]])
write(result, sys.argv[2])
print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter() - t, len(result.item_ids),
      len(result.models))
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


def measure(logs: Path, out: Path) -> tuple[float, float, int, int]:
    """(peak MB above the interpreter's start, seconds, items, models) of one import in a fresh process."""
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT), "HOME": str(out.parent)}
    line = subprocess.run([sys.executable, "-c", PROBE, str(logs), str(out)], check=True, capture_output=True,
                          text=True, env=env).stdout.split()  # fmt: skip
    base, peak, seconds, items, models = float(line[0]), float(line[1]), float(line[2]), int(line[3]), int(line[4])
    return (peak - base) / 1024, seconds, items, models  # ru_maxrss is in KB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=14000, help="documents of the large file (MMLU: 14,042)")
    ap.add_argument("--prompt-kb", type=float, default=2.5, help="the few-shot prompt's size, KB")
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
    print("peak: the import's peak RSS above the interpreter's own; /largest and /total: over the largest "
          "samples file's size and over all of them")


if __name__ == "__main__":
    main()
