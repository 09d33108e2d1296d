"""A sweep's result in the paper's Table 2 layout: per benchmark, the top-k gap sum before, and per
strategy the sum after, its relative reduction, the target deviation and the search's cost.

Read from the runs' own ``report.json`` (so the table says exactly what each run reports), averaged
over the sweep's seeds; written as ``table.md``, ``table.json`` and ``table.png`` (relative reduction
per benchmark and strategy), each through a temporary file and a rename.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np


def collect(sweep) -> dict[str, Any]:
    """The table as data: rows in the sweep's benchmark order, strategies in its order."""
    strategies = list(sweep.config.strategies)
    rows: list[dict[str, Any]] = []
    by_row: dict[str, dict[str, list[dict[str, Any]]]] = {}
    order: list[str] = []
    missing: list[str] = []
    planned_k: dict[str, int] = {}  # row -> its gaps (an entry may set its own): the k of its top-k sums
    simulated: list[str] = []  # the runs whose report says simulated: `sim serve` behind backend openai is too
    real: list[str] = []
    for plan in sweep.runs:
        if plan.row not in by_row:
            by_row[plan.row] = {s: [] for s in strategies}
            order.append(plan.row)
            planned_k[plan.row] = plan.opts.gaps
        rep = _report(plan.run_dir)
        if rep is None:
            missing.append(plan.label)
        else:
            by_row[plan.row][plan.strategy].append(rep)
            (simulated if rep.get("simulated") else real).append(plan.label)
    for name in order:
        cells: dict[str, Any] = {}
        before: list[float] = []
        n_items, k = None, planned_k[name]
        for s in strategies:
            reps = by_row[name][s]
            if not reps:
                cells[s] = None
                continue
            before += [r["top_k_sum_before"] for r in reps]
            n_items, k = reps[0]["n_items"], reps[0]["top_k"]
            devs = [r["target_deviation"] for r in reps if r.get("target_deviation") is not None]
            expected = [r.get("gaps_expected_inside") for r in reps]
            between = [r.get("gaps_expected_between_edges") for r in reps]
            cells[s] = {
                "runs": [r["run_id"] for r in reps],
                "seeds": [r["seed"] for r in reps],
                "top_k_sum_after": _mean(r["top_k_sum_after"] for r in reps),
                "reduction": _mean(r["top_k_reduction"] for r in reps),
                "reduction_sd": float(np.std([r["top_k_reduction"] for r in reps], ddof=1)) if len(reps) > 1 else None,
                "target_deviation": _mean(devs) if devs and s != "oracle" else None,
                "gaps_filled": _mean(r["gaps_filled"] for r in reps),
                # None where a report has none (the oracle's, or written before the figure)
                "gaps_expected_inside": None if None in expected else _mean(expected),
                # ... and between the two original items at each gap's edges, their fit error counted (None where
                # a report has none: written before the figure, or the oracle's)
                "gaps_expected_between_edges": None if None in between else _mean(between),
                "model_calls": _mean(r["spend"].get("model_calls", 0) for r in reps),
                "rollouts": _mean(r["spend"].get("rollouts", 0) for r in reps),
                "simulated": any(r.get("simulated") for r in reps),
            }
            true_after = [r.get("top_k_sum_after_true (simulated)") for r in reps]
            if cells[s]["simulated"] and all(v is not None for v in true_after) and s != "oracle":
                cells[s]["true_reduction (simulated)"] = _mean(
                    1 - a / r["top_k_sum_before"] for a, r in zip(true_after, reps, strict=True))
        rows.append({"benchmark": name, "n_items": n_items, "top_k": k,
                     "top_k_sum_before": _mean(before) if before else None, "strategies": cells})
    # Reductions of top-k sums with different k (an entry's own gaps) are different figures: averaged per k.
    by_k: dict[str, dict[str, float | None]] = {}
    for k in sorted({r["top_k"] for r in rows}):
        of_k = [r for r in rows if r["top_k"] == k]
        by_k[str(k)] = {}
        for s in strategies:
            vals = [r["strategies"][s]["reduction"] for r in of_k if r["strategies"].get(s)]
            by_k[str(k)][s] = _mean(vals) if len(vals) == len(of_k) else None  # only over a complete column
    average = next(iter(by_k.values())) if len(by_k) == 1 else {s: None for s in strategies}
    return {
        "sweep": sweep.name, "source": sweep.source, "strategies": strategies,
        "seeds": list(sweep.config.seeds), "backend": sweep.config.backend,
        # a run's own report says whether it was simulated (its endpoints may be `sim serve`'s, backend openai)
        "simulated": sweep.config.backend == "sim" or bool(simulated),
        "simulated_runs": simulated, "real_runs": real,
        "rows": rows, "average_reduction": average,
        "average_reduction_by_k": by_k,
        "missing_runs": missing,
        "gaps": sweep.config.gaps,
        # plan -> the plan whose run it shows (options that differ only where its strategy never reads them)
        "shared_runs": {plan.label: plan.shares for plan in sweep.runs if getattr(plan, "shares", None)},
    }


def write_table(sweep) -> dict[str, Any]:
    table = collect(sweep)
    out = Path(sweep.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # A sweep stopped while writing left its temp file (the sweep's lock is held here: none is in use)
    for stale in out.glob(".table*"):  # .table.md-*, .table.json-*, .table-*.png
        stale.unlink(missing_ok=True)
    if table["rows"]:
        _plot(table, out / "table.png")
    _write(out / "table.md", markdown(table))
    _write(out / "table.json", json.dumps(table, indent=1) + "\n")
    table["paths"] = {name: str(out / name) for name in ("table.md", "table.json", "table.png")}
    return table


def markdown(table: dict[str, Any]) -> str:
    strategies = table["strategies"]
    ks = _ks(table)
    k = ks[0] if len(ks) == 1 else "k"  # rows of different k (an entry's own gaps) each name theirs
    lines = []
    banner = _simulated_banner(table)
    if banner:
        lines += [banner, ""]
    lines += [f"# Sweep {table['sweep']}: top-{k} gap sum before and after gap filling", "",
              f"Reduction is 1 - after / before of the top-{k} gap sum on the benchmark's normalized difficulty "
              f"scale (larger is better); target dev. is the mean |z - z*| of the chosen items at their "
              f"confirmed z (lower is better); cost is the search's model calls / rollouts (mean per run). Seeds: "
              f"{', '.join(str(s) for s in table['seeds'])}."
              + (" k is each benchmark's number of gaps; reductions of different k are averaged apart." if k == "k" else ""),
              ""]
    head = ["benchmark", "items"] + (["k"] if k == "k" else []) + [f"top-{k} before"]
    for s in strategies:
        head += [f"{s} after", f"{s} reduction"]
    head += [f"{s} target dev." for s in strategies if s != "oracle"]
    head += [f"{s} cost" for s in strategies if s != "oracle"]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in table["rows"]:
        cells = [r["benchmark"], str(r["n_items"] or "")] + ([str(r["top_k"])] if k == "k" else []) \
            + [_num(r["top_k_sum_before"])]
        for s in strategies:
            c = r["strategies"].get(s)
            cells += [_num(c and c["top_k_sum_after"]), _pct(c and c["reduction"], c and c["reduction_sd"])]
        for s in strategies:
            if s != "oracle":
                c = r["strategies"].get(s)
                cells.append(_num(c and c["target_deviation"]))
        for s in strategies:
            if s != "oracle":
                c = r["strategies"].get(s)
                cells.append("" if not c else f"{_amount(c['model_calls'])} / {_amount(c['rollouts'])}")
        lines.append("| " + " | ".join(cells) + " |")
    by_k = table.get("average_reduction_by_k") or {str(ks[0]): table["average_reduction"]}
    for row_k, average in by_k.items():
        avg = ["average", ""] + ([row_k] if k == "k" else []) + [""]
        for s in strategies:
            avg += ["", _pct(average.get(s))]
        avg += [""] * (len(head) - len(avg))
        lines.append("| " + " | ".join(avg) + " |")
    true_cols = [s for s in strategies if any("true_reduction (simulated)" in (r["strategies"].get(s) or {})
                                              for r in table["rows"])]
    if true_cols:
        lines += ["", "Simulated world only: the reduction with each chosen item at its TRUE difficulty "
                  "(the world's latent value, which no search decision saw):", "",
                  "| benchmark | " + " | ".join(f"{s} true reduction" for s in true_cols) + " |",
                  "|" + " --- |" * (len(true_cols) + 1)]
        for r in table["rows"]:
            vals = [_pct((r["strategies"].get(s) or {}).get("true_reduction (simulated)")) for s in true_cols]
            lines.append(f"| {r['benchmark']} | " + " | ".join(vals) + " |")
    if table["missing_runs"]:
        lines += ["", f"Not finished (rerun the sweep to resume): {', '.join(table['missing_runs'])}."]
    if table.get("shared_runs"):
        lines += ["", "One run shown in more than one row (their options differ only where its strategy never reads "
                  "them; each row's figures, and the average, count it): " + ", ".join(
                      f"{mine} is {theirs}" for mine, theirs in table["shared_runs"].items()) + "."]
    return "\n".join(lines) + "\n"


def _ks(table: dict[str, Any]) -> list[int]:
    """The rows' k, each once (the sweep's gaps where there is no row)."""
    return sorted({r["top_k"] for r in table["rows"] if r["top_k"]}) or [table.get("gaps") or 3]


def _simulated_banner(table: dict[str, Any]) -> str:
    """What of the sweep was simulated, where any of it was: the runs' own reports say (a run against `sim
    serve`'s endpoints is simulated whatever the backend is called)."""
    if not table["simulated"]:
        return ""
    if table["backend"] == "sim":
        return "**SIMULATED SWEEP**: every model here is the simulated world (backend sim); no real LLM was called."
    if not table.get("real_runs"):
        return ("**SIMULATED SWEEP**: the configured endpoints serve benchfill's simulated world (`sim serve`); no "
                f"real LLM answered (backend {table['backend']}).")
    return ("**PARTLY SIMULATED SWEEP**: these runs' endpoints served benchfill's simulated world (`sim serve`), no "
            f"real LLM answering them: {', '.join(table['simulated_runs'])}; the rest ran against real endpoints "
            f"(backend {table['backend']}), and the averages mix both.")


def _plot(table: dict[str, Any], path: Path) -> None:
    from benchfill.plots import new_figure, save_png

    names = [r["benchmark"] for r in table["rows"]]
    strategies = table["strategies"]
    width = 0.8 / len(strategies)
    fig = new_figure(figsize=(max(4.5, 1.1 * len(names) + 2), 3.6), dpi=120)
    ax = fig.subplots()
    x = np.arange(len(names))
    for j, s in enumerate(strategies):
        vals = [100 * ((r["strategies"].get(s) or {}).get("reduction") or 0.0) for r in table["rows"]]
        ax.bar(x + (j - (len(strategies) - 1) / 2) * width, vals, width, label=s)
    ks = _ks(table)
    if len(ks) > 1:  # each bar names its k
        names = [f"{r['benchmark']} (k={r['top_k']})" for r in table["rows"]]
    ax.set_xticks(x, names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(f"top-{ks[0] if len(ks) == 1 else 'k'} gap sum reduction (%)")
    title = f"sweep {table['sweep']}" + (
        "" if not table["simulated"] else " (PARTLY SIMULATED)" if table.get("real_runs") and
        table["backend"] != "sim" else " (SIMULATED)")
    ax.set_title(title, fontsize=10)
    ax.axhline(0, color="black", lw=0.8)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    save_png(fig, path)


def _report(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(run_dir) / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _mean(values) -> float:
    vals = [float(v) for v in values]
    return float(np.mean(vals)) if vals else float("nan")


def _num(v: float | None) -> str:
    return "" if v is None or v != v else f"{v:.4f}"


def _amount(v: float) -> str:
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"


def _pct(v: float | None, sd: float | None = None) -> str:
    if v is None or v != v:
        return ""
    return f"{100 * v:.2f}%" + (f" ± {100 * sd:.2f}" if sd is not None else "")


def _write(path: Path, text: str) -> None:
    from benchfill.outputs import named, shared_mode, temp_path

    tmp = temp_path(path.parent, path.name)  # a killed write's is removed by the next
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, shared_mode())
        os.replace(tmp, path)
    except OSError as exc:
        named(exc, path)
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
