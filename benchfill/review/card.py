"""The parts of a release meant for people: the dataset card, the ECDF plot, the changelog.

The card's YAML header is what the Hugging Face ``datasets`` library reads
(``configs:`` names the data files, ``dataset_info.features`` their columns' types);
the body carries the coverage figures before and after the release's new items.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from benchfill import untrusted

DATA_FILE = "data/test.jsonl"
PLOT_FILE = "plots/ecdf_before_after.png"
CARD_TOP_K = 5  # the card's gap-sum figure; a release is not tied to one run's --gaps


def _figure(value: Any) -> str:
    """A card figure: a fraction to four places, as the interval beside it (0.43 read as less precise than
    0.4312); a count as it is."""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def coverage_figures(z: list[float], run_k: int | None = None) -> dict[str, float | int]:
    """DDM (uniform target), max gap and top-5 gap sum of normalized difficulties (benchfill.coverage), and the
    top-k gap sum with the run's k (its --gaps, the run report's figure) where that is another k."""
    from benchfill.coverage import ddm, max_gap, top_k_gap_sum

    out = {
        "items": len(z),
        "ddm": round(ddm(z), 4),
        "max_gap": round(max_gap(z), 4),
        f"top{CARD_TOP_K}_gap_sum": round(top_k_gap_sum(z, CARD_TOP_K), 4),
    }
    if run_k is not None and run_k != CARD_TOP_K:
        out[f"top{run_k}_gap_sum"] = round(top_k_gap_sum(z, run_k), 4)
    out["outside_range"] = sum(1 for v in z if v < 0 or v > 1)
    return out


def ecdf_plot(before: list[float], after: list[float], path: Path, title: str) -> None:
    """Step ECDFs of z before and after, new items marked on the axis."""
    from benchfill.plots import new_figure

    fig = new_figure(figsize=(6, 4), dpi=100)
    ax = fig.subplots()
    for z, label, style in ((before, "before", "--"), (after, "after", "-")):
        xs = sorted(z)
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step([min(0.0, xs[0])] + xs, [0.0] + ys, where="post", linestyle=style, label=f"{label} (n={len(xs)})")
    new = sorted(set(after) - set(before))
    ax.plot(new, [0.0] * len(new), "|", markersize=14, color="C3", label="new items")
    ax.plot([0, 1], [0, 1], ":", color="grey", linewidth=0.8, label="uniform")
    ax.set_xlabel("normalized difficulty z")
    ax.set_ylabel("ECDF")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    # No timestamp in the PNG metadata: the same release content gives the same bytes.
    fig.savefig(path, metadata={"Software": None})


class _Mixed(ValueError):
    """A column whose values no one `datasets` type holds (a string in one row, a number in another)."""


def card_features(rows: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The card's ``dataset_info.features``: every column of ``rows`` with the `datasets` type its JSON
    values take, in `datasets`' YAML form. None where a column mixes types no one type holds.

    Without them `datasets` takes the types from the first 10 MB of the data file, where a provenance
    column of original items only (``ancestor_id``, ``gap_index``, ...) is all null, and a larger
    release then fails to load at its first generated row."""
    return column_types(rows)[0]


def mixed_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The columns of ``rows`` whose values no one `datasets` type holds (an answer edited from 12 to "2/3")."""
    return column_types(rows)[1]


def column_types(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]] | None, list[str]]:
    """Both in one pass over the rows: the features (None where a column mixes types) and the mixing columns."""
    features, mixed = [], []
    for c in dict.fromkeys(k for r in rows for k in r):
        try:
            features.append({"name": c, **_feature([r.get(c) for r in rows])})
        except _Mixed:
            mixed.append(c)
    return (None if mixed else features), mixed


def _feature(values: list[Any]) -> dict[str, Any]:
    present = [v for v in values if v is not None]
    kinds = {type(v) for v in present}
    if not kinds:
        return {"dtype": "null"}
    if kinds == {bool}:
        return {"dtype": "bool"}
    if kinds <= {int, float}:
        return {"dtype": "int64" if kinds == {int} else "float64"}
    if kinds == {str}:
        return {"dtype": "string"}
    if kinds == {list}:
        inner = _feature([x for v in present for x in v])
        # `datasets`' short forms: "list: string" for a list of values, "list: [fields]" for one of objects
        return {"list": inner.get("dtype") or inner.get("struct") or inner}
    if kinds == {dict}:
        keys = dict.fromkeys(k for v in present for k in v)
        if not keys:
            raise _Mixed("an object without fields")
        return {"struct": [{"name": k, **_feature([v.get(k) for v in present])} for k in keys]}
    raise _Mixed(", ".join(sorted(t.__name__ for t in kinds)))


def dataset_card(meta: dict[str, Any], before: dict, after: dict, changelog: str,
                 features: list[dict[str, Any]] | None = None) -> str:
    import yaml

    header = {
        "pretty_name": f"{meta['benchmark']} {meta['version']} (benchfill)",
        "tags": ["benchfill", "difficulty", "irt"],
        # The description makes `datasets`' cache key differ per release (benchfill.release).
        "configs": [{"config_name": "default",
                     "description": f"{meta['benchmark']} {meta['version']} data sha256 {meta.get('data_sha256', '')}",
                     "data_files": [{"split": "test", "path": DATA_FILE}]}],  # fmt: skip
    }
    if meta.get("license"):  # the Hub's field: the original items' licence, as the spec states it
        lic = " ".join(str(meta["license"]).split())
        # the Hub takes an id there (mit, apache-2.0, cc-by-4.0, ...) and refuses a push with anything else:
        # free text goes to license_name under "other"
        header = ({"license": lic} if re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", lic) else
                  {"license": "other", "license_name": lic}) | header
    if features:  # (card_features)
        header["dataset_info"] = {"features": features}
    header["benchfill"] = meta
    interval = after.get("after_interval") or {}
    level = f"{100 * (after.get('interval_level') or 0.9):.0f}%"

    def span(key: str) -> str:
        lo_hi = interval.get(key)
        return "" if lo_hi is None else f" {lo_hi[0]:.4f} to {lo_hi[1]:.4f} |"

    run_k = meta.get("run_top_k")
    run_row = ((f"top-{run_k} gap sum (the run's --gaps)", f"top{run_k}_gap_sum"),) if (
        run_k and run_k != CARD_TOP_K and f"top{run_k}_gap_sum" in before) else ()
    rows = "\n".join(
        f"| {name} | {_figure(before[key])} | {_figure(after[key])} |" + (span(key) or (" |" if interval else ""))
        for name, key in (
            ("items", "items"),
            ("DDM (uniform)", "ddm"),
            ("max gap", "max_gap"),
            (f"top-{CARD_TOP_K} gap sum", f"top{CARD_TOP_K}_gap_sum"),
            *run_row,
            ("outside [0, 1]", "outside_range"),
        )
    )
    head = "| figure | before | after |" + (f" after, {level} interval |" if interval else "")
    rule = "| --- | --- | --- |" + (" --- |" if interval else "")
    expected = after.get("after_expected") or {}
    key = f"top{CARD_TOP_K}_gap_sum"
    averaged = ""
    if interval:
        averaged = ("\nThe interval draws each new item's z from its placement error (the sampling of its rollouts, "
                    "the probe panel's own ability error, which it inherits, and an allowance for its unknown "
                    "discrimination) and holds the original items fixed: their own fit error, which moves the gaps' "
                    "edges, is not in it. ")
        if key in expected and before[key] > 0:
            averaged += (f"Averaged over those draws, the top-{CARD_TOP_K} gap sum is {expected[key]:.4f} "
                         f"({100 * (1 - expected[key] / before[key]):.1f}% below before; an item truly beyond the "
                         "easiest or hardest original opens a new gap).\n")
    below = [name for name, k in (("max gap", "max_gap"), (f"top-{CARD_TOP_K} gap sum", key), *run_row)
             if k in interval and after[k] < interval[k][0] - 1e-12]
    if below:  # as the run's report says it, in the same case
        from benchfill.report import BELOW_WHY

        verb = "lies below its interval" if len(below) == 1 else "lie below their intervals"
        averaged += f"\nThe {' and the '.join(below)} after {verb}: {BELOW_WHY}.\n"
    sim = ""
    if meta.get("simulated"):
        sim = ("\n> New items in this release come from the **simulated** world: their texts, answers, the judge's "
               "verdicts and their difficulties are simulated, not an LLM's.\n" if meta.get("n_generated") else
               "\n> This release comes from a run on the **simulated** world: the probe answers that place its items "
               "are simulated, not a model's.\n")
    rec = meta.get("scale_of_record") or {}
    if meta.get("n_generated") and meta.get("scale_simulated", meta.get("simulated") and
                                             rec.get("run_id") == meta.get("run_id")):
        # the originals' places, and so every "before" figure, came from the scale of record's fit, which a
        # simulated probe panel's answers joined (alone where the benchmark publishes no response matrix)
        whose = "this run's" if rec.get("run_id") == meta.get("run_id") else f"run {untrusted.md_code(rec.get('run_id'))}'s"
        sim += (f"\n> The original items' difficulties, and so every \"before\" figure, come from {whose} IRT "
                "fit (the scale of record), to which a simulated probe panel's answers contribute (they are all "
                "of it where the benchmark publishes no response matrix): they are simulated too.\n")
    outside = meta.get("outside_gap") or []
    if outside:
        listed = ", ".join(untrusted.md_code(i) for i in outside)
        sim += (f"\n> {len(outside)} generated item(s) lie outside the gap they were made for, as the run measured "
                f"the item and its gap, both mapped onto this scale (flag `outside_gap` in column `flags`): {listed}. "
                "Each adds an item to the axis, but not where the gap was.\n")
    memory = meta.get("search_memory") or {}
    if memory.get("earlier_runs"):
        runs = ", ".join(untrusted.md_code(r) for r in memory["earlier_runs"])
        sim += (f"\n> The search read the children of earlier runs from a shared store ({runs}: "
                f"{memory.get('entries_from_earlier_runs') or 0} of them), so its settings (`run_options`) alone "
                "do not make this run again.\n")
    near = meta.get("near_duplicate") or []
    if near:
        sim += (f"\n> {len(near)} generated item(s) nearly repeat an item of the benchmark (flag `near_duplicate`): "
                f"{', '.join(untrusted.md_code(i) for i in near)}. A reviewer accepted them; they still count in the "
                "after-figures.\n")
    mixed = meta.get("mixed_columns") or []
    if mixed:
        # the card then declares no column types: readers infer them from the first rows, and a release over
        # 10 MB failed to load at the first row of the other type (pyarrow's JSON reader, `datasets`)
        sim += (f"\n> Column(s) {', '.join(untrusted.md_code(c) for c in mixed)} hold values no one type holds "
                "(text in some rows and numbers in others, as an edit in review can make, or objects with no "
                "fields), so this card declares no column types. "
                "Readers that infer types from the first rows can refuse the file: `datasets` on a data file over "
                "10 MB, `pyarrow.json.read_json`. Read it line by line with `json.loads`, or with "
                "`pandas.read_json(path, lines=True, dtype=False)`.\n")
    if meta.get("edited_unplaced"):
        sim += (f"\n> {meta['edited_unplaced']} generated item(s) were edited in review after their difficulty was "
                "measured (column `edited`); they are released but not counted in the after-figures, whose "
                "measurement no longer describes them.\n")
    return f"""---
{yaml.safe_dump(header, sort_keys=False, allow_unicode=True).rstrip()}
---

# {meta["benchmark"]} {meta["version"]}

The original {meta["benchmark"]} items ({meta["n_original"]}) plus {meta["n_generated"]} generated item(s)
accepted in human review ({meta["release_rule"]}). Made by benchfill from run {untrusted.md_code(meta["run_id"])}.
{_source_line(meta)}{sim}
## Coverage of the difficulty axis

Normalized IRT difficulty z on the original benchmark's scale (0 = easiest original item,
1 = hardest). New items are placed by their confirmed difficulty where there is one, else the annotated one.
{_scale_line(meta)}

{head}
{rule}
{rows}
{averaged}{_top_k_note(meta, run_row)}
![ECDF of z before and after]({PLOT_FILE})

## Provenance columns

Every row of `{DATA_FILE}` carries the benchmark's own fields and:
`origin` (original or generated), `ancestor_id`, `gap_index`, `gap_left`, `gap_right`, `target_z`,
`difficulty`, `difficulty_se`, `z`, `z_se`, `difficulty_source`, `annotated_*`, `confirmed_*`,
`probe_panel`, `probe_results`, `rewriter_model`, `judge_model`, `judge_reason`, `flags`, `reviews`,
`edited`, `edited_by`, `original_fields`, `simulated`, `true_difficulty`, `run_id`, `proposed_at`,
`released_in`, `released_at`. Lists and objects are JSON-encoded strings. Every difficulty and z of a row
(`gap_left`, `gap_right` and `target_z` included) is on the scale of record. A generated row's estimates,
target and gap edges are its run's, all mapped onto the record by one line, so its flag `outside_gap` says
what the run measured; an original item keeps the record's own position, which can sit a little off that
line. `true_difficulty` is a simulated item's true difficulty, on that scale too.
The flag `beyond_reach` says that the part of a row's placement error that no rollout removes (the probes'
abilities, the item's unknown slope, each probe's own offset on the item where its run allowed for one) was
wider than its gap's half-width: whether it lies in its gap is near chance, whatever its z, until probes
nearer its difficulty, or many more of them, place it.
A field of the benchmark's own named like one of these (a `difficulty` label, say) is the column `item_<name>`.

`manifest.json` holds the sha256 of every file; check it with `benchfill release verify DIR` (a copy
downloaded from the Hub, in any folder or the Hub's cache: `benchfill release verify DIR --copy`).

## Changelog

{changelog}
"""


def _source_line(meta: dict[str, Any]) -> str:
    """Where the original items came from (the spec's ``source``), as a line of its own; none where unsaid."""
    source, licence, cite = meta.get("source"), meta.get("license"), meta.get("citation")
    line = f"Original items: {untrusted.md_text(str(source))}.\n" if source else ""
    line += (f"Their licence, as the benchmark's spec states it: {untrusted.md_text(str(licence))}.\n" if licence else
             "The benchmark's spec states no licence for the original items (its `license` field): check the "
             "original's terms before publishing this release.\n")
    if cite:
        line += f"\nCite the original items as:\n\n```\n{str(cite).replace('```', '')}\n```\n"
    return line


def _scale_line(meta: dict[str, Any]) -> str:
    rec = meta.get("scale_of_record")
    if not rec:
        return ""
    line = (f"The scale of record of {meta['benchmark']} is the IRT fit of run {untrusted.md_code(rec['run_id'])}, fixed by its first "
            f"release ({rec['established_in']}): every release places the original items where it does, so their "
            "\"before\" figures are the same in every release that holds the same original items.")
    moved = meta.get("originals_moved")
    if moved:  # an items file edited between runs: said, not hidden behind the sentence above
        line += (f" This release's original items are not {untrusted.md_text(moved['previous'])}'s "
                 f"({untrusted.md_text(moved['summary'])}; the changelog names them): {moved.get('effect')}.")
    if meta.get("run_id") != rec["run_id"]:
        line += (f" This release's run was mapped onto it through the {rec['shared_items']} original items both fits "
                 f"share (b_record = {rec['intercept']:.4f} + {rec['slope']:.4f} b_run).")
    return line + "\n"


def _top_k_note(meta: dict[str, Any], run_row: tuple) -> str:
    """Why the card's top-5 and the run report's top-k figures differ."""
    if not run_row:
        return ""
    k = meta["run_top_k"]
    return (f"\nThe top-{CARD_TOP_K} gap sum is the card's own figure, the same k for every release of "
            f"{meta['benchmark']} whatever run made it, so that releases compare. The top-{k} row uses the k of "
            f"run {untrusted.md_code(meta['run_id'])} (its --gaps), as that run's report does; the two reports still differ where this "
            "release holds other new items than the run chose (only those accepted in review, and those carried from "
            "earlier releases) or places them on a scale of record that is not the run's own fit.\n")


def changelog_entry(version: str, date: str, run_id: str, added: list[str], rule: str, before: dict, after: dict,
                    outside: list[str] | None = None) -> str:
    ids = ", ".join(untrusted.md_code(i) for i in added) if added else "none"
    extra = "".join(f", {k.replace('top', 'top-').replace('_gap_sum', ' gap sum')} {_figure(before[k])} -> "
                    f"{_figure(after[k])}"
                    for k in before if k.endswith("_gap_sum") and k != f"top{CARD_TOP_K}_gap_sum")
    out = (
        f"### {version} ({date})\n\n"
        f"- {len(added)} generated item(s) added from run {untrusted.md_code(run_id)}: {ids}\n"
        f"- release rule: {rule}\n"
        f"- max gap {_figure(before['max_gap'])} -> {_figure(after['max_gap'])}, "
        f"top-5 gap sum {_figure(before['top5_gap_sum'])} -> {_figure(after['top5_gap_sum'])}{extra}\n"
    )
    if outside:
        out += f"- outside their gap (flag `outside_gap`): {', '.join(untrusted.md_code(i) for i in outside)}\n"
    return out
