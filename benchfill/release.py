"""Versioned releases of a reviewed benchmark: write, verify, diff.

A release is a directory ``<root>/<benchmark>/<version>/`` that the Hugging Face
``datasets`` library loads as it is: ``data/test.jsonl`` (original items plus the
accepted generated ones, each row with its provenance), ``README.md`` (dataset
card), ``CHANGELOG.md``, ``plots/`` and ``manifest.json`` (sha256 of every file).
It is built in a temp directory and renamed into place, and never rewritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchfill import __version__, calling_module, locks, untrusted
from benchfill.benchmarks import RELEASE_COLUMNS, is_release_row
from benchfill.errors import NOTE, BenchfillError, ConfigError, DataError
from benchfill.hub import ID_COLUMNS
from benchfill.measure.before_after import before_after
from benchfill.outputs import named
from benchfill.release_carry import (
    RUN_SEP,
    carry_forward,
    check_remove,
    keep_out,
    original_changes,
    originals_effect,
    parse_time,
)
from benchfill.review import board as review_board
from benchfill.review.board import ReviewBoard, hold_moment, moment_after
from benchfill.review.card import (
    CARD_TOP_K,
    DATA_FILE,
    PLOT_FILE,
    changelog_entry,
    column_types,
    coverage_figures,
    dataset_card,
    ecdf_plot,
)
from benchfill.review.rule import RULE_VERSION, ReleaseRule
from benchfill.run import INPUTS_META
from benchfill.schema import Item, Release, ReviewDecision, as_utc
from benchfill.store import run_name, simulated_run

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
PUBLISHING_META = "release_publishing"  # the release a run is publishing, until its store has recorded it
SIMULATED = "**SIMULATED**"  # the mark of simulated figures in a changelog and the benchmark folder's card
BEFORE_EDIT = ", before the edit"  # a difficulty_source measured on the item a reviewer then edited
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?\Z",
    # \Z: $ also matched before a final newline ("1.0.0\n" was released, under a folder of that name, and 1.0.0
    # then refused as not newer); ASCII: \d took any script's digits ("1\u0661.0.0" sorted as 11.0.0)
    re.ASCII,
)
PROVENANCE = RELEASE_COLUMNS  # the columns every row carries besides the item's fields
# The most each of a new release's X, Y and Z may be (a date's 2025.6.30 fits): a typo such as 999999999.0.0 was
# released, and every later version was then refused as not newer than it, for good (versions are immutable).
MAX_VERSION_PART = 9999
MAX_VERSION_LEN = 64


@dataclass
class ReleaseResult:
    version: str
    path: Path
    n_original: int
    n_generated: int
    manifest_sha256: str
    added: list[str] = field(default_factory=list)  # generated items new in this release
    carried: list[str] = field(default_factory=list)  # kept from the previous release
    removed: list[str] = field(default_factory=list)  # dropped from the previous release by a reviewer
    changed: dict[str, list[str]] = field(default_factory=dict)  # id -> item fields changed
    pending: list[str] = field(default_factory=list)  # this run's items still awaiting review (not released)
    resumed: bool = False  # published by an interrupted command, recorded by this one
    complete: bool = False  # made before by this run, as the same command would make it now: nothing written
    held: dict[str, str] = field(default_factory=dict)  # this run's accepted items an earlier release removed
    rule_note: str = ""  # set when the release's rule is not the one the review page was served with
    # generated items whose text is another released item's (after Unicode normal form, spacing and case):
    # (generated id, the id of the first item with that text); released all the same, and said
    same_text: list[tuple[str, str]] = field(default_factory=list)
    # the original items against the previous release's: {"added": [...], "removed": [...], "changed": {id:
    # fields}}, empty where they are the same (an items file edited between runs; release_carry.originals_effect)
    originals: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReleaseDiff:
    a: str
    b: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)  # item id -> changed item fields
    # items in both whose measured place (difficulty or z) differs: a provenance column, not the item, but a
    # reproduction diffed against the original release said "0 changed" of originals measured elsewhere
    placed_otherwise: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"{self.a} -> {self.b}: {len(self.added)} added, {len(self.removed)} removed, {len(self.changed)} changed"]
        t = untrusted.terminal  # ids from the files: printed with their control characters escaped
        out += [f"+ {t(i)}" for i in self.added] + [f"- {t(i)}" for i in self.removed]
        out += [f"~ {t(i)} ({', '.join(map(t, f))})" for i, f in self.changed.items()]
        if self.placed_otherwise:
            shown = ", ".join(t(i) for i in self.placed_otherwise[:10])
            more = f", ... (+{len(self.placed_otherwise) - 10})" if len(self.placed_otherwise) > 10 else ""
            out.append(f"placed otherwise: {len(self.placed_otherwise)} item(s) in both have another difficulty or "
                       f"z (measured anew, not edited): {shown}{more}")
        return out


def semver_key(version: str) -> tuple:
    m = SEMVER.match(version)
    if not m:
        raise ConfigError(f"version {version!r} is not a semantic version (X.Y.Z, e.g. 1.0.0)")
    major, minor, patch, pre, _build = m.groups()
    # A pre-release sorts before its release (1.0.0-rc.1 < 1.0.0), per semver.org.
    pre_key = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")) if pre else None
    return (int(major), int(minor), int(patch), pre_key is None, pre_key or ())


def check_new_version(version: str) -> None:
    """Refuse, as a new release's version, one that is not semantic, has an X, Y or Z over
    ``MAX_VERSION_PART`` or is longer than ``MAX_VERSION_LEN``. (Only new ones: a release made before the
    bounds still sorts among the others.)"""
    m = SEMVER.match(version)
    if m is None:
        semver_key(version)  # says why
        return
    for part, digits in zip(("major (X)", "minor (Y)", "patch (Z)"), m.groups()[:3], strict=False):
        # by its digits first: int() of over 4,300 of them is a ValueError of Python's own
        if len(digits) > len(str(MAX_VERSION_PART)) or int(digits) > MAX_VERSION_PART:
            raise ConfigError(f"version {version[:40]!r}{'...' if len(version) > 40 else ''}: its {part} number "
                              f"is over {MAX_VERSION_PART}, the most a release's version part may be (no later "
                              "version could come after it)")
    if len(version) > MAX_VERSION_LEN:  # it names a folder, and a long pre-release tag is a paste gone wrong
        raise ConfigError(f"version {version[:40]!r}...: {len(version)} characters, over {MAX_VERSION_LEN}")


def release(
    run_dir: str | Path,
    version: str,
    out: str | Path | None = None,
    rule: ReleaseRule | None = None,
    remove: dict[str, str] | None = None,
) -> ReleaseResult:
    """Release the run's original items plus its accepted ones as ``version``.

    ``out`` is the releases root (default: ``releases/`` beside the run directory); the
    release lands in ``<out>/<benchmark>/<version>``. An existing version is refused.
    The generated items of the latest earlier release are carried forward, unless a reviewer
    removes one: ``remove`` maps item ids to who removed them and why, and an item of this
    run rejected under ``rule`` by a decision made after that release counts as removed too.
    Releases into one benchmark folder take turns (a lock on the folder): a second one waits, then
    builds on the first.
    """
    # Types first, each naming its argument: a wrong one would fail deep inside as a TypeError (re.match on
    # an int version) or an AttributeError, which reads as a bug in benchfill rather than in the call.
    if not isinstance(version, str):
        raise ConfigError(f"version: expected a string such as '1.0.0', got {type(version).__name__} {version!r}")
    for name, value, optional in (("run_dir", run_dir, False), ("out", out, True)):
        if not (isinstance(value, (str, os.PathLike)) or (optional and value is None)):
            raise ConfigError(f"{name}: expected a path (str or pathlib.Path), got {type(value).__name__}")
    if rule is not None and not isinstance(rule, ReleaseRule):
        raise ConfigError(f"rule: expected a ReleaseRule or None, got {type(rule).__name__}")
    check_remove(remove)
    check_new_version(version)  # a version that is not one is refused before anything is read
    run_dir = Path(run_dir)
    with ReviewBoard(run_dir, rule) as board:
        bench = _safe_name(board.benchmark)
        bench_dir = (Path(out) if out else run_dir.resolve().parent / "releases") / bench
        # the store's turns too: the same run released from another folder of its store (another machine)
        # checked its versions unseen by this folder's lock, and the second row met the first's as an
        # IntegrityError; taking turns, the second finds the first's release and says so
        with _holding(bench_dir), board.store.turns("release"):
            return _release(board, run_dir, version, bench_dir, remove)


@contextlib.contextmanager
def _holding(bench_dir: Path):
    """The benchmark's release folder, created where missing and locked (``locks.hold``) from the check of
    its versions to the write of its changelog: a second release into it waits for the first. A folder
    this call created is removed again if the release fails before writing into it."""
    made = [p for p in (bench_dir, *bench_dir.parents) if not p.exists()]
    while True:
        _mkdir_public(bench_dir)
        fd = locks.hold(bench_dir)
        try:  # the folder a release that failed took back while this one waited: make and hold it again
            if fd is None or os.fstat(fd).st_ino == bench_dir.stat().st_ino:
                break
        except FileNotFoundError:
            pass
        locks.release(fd)
    try:
        yield
    except BaseException:
        for p in made:  # innermost first; a folder someone else wrote into is not empty and stays
            with contextlib.suppress(OSError):
                p.rmdir()
        raise
    finally:
        locks.release(fd)


def _release(board: ReviewBoard, run_dir: Path, version: str, bench_dir: Path,
             remove: dict[str, str] | None) -> ReleaseResult:
    """The release, with the benchmark folder held (``_holding``)."""
    _check_root_readme(bench_dir)
    key, bench = semver_key(version), bench_dir.name
    target = bench_dir / version
    recorded = board.store.all(Release, Release.version == version)
    if recorded:
        where = Path(recorded[0].path) if Path(recorded[0].path).is_absolute() else target  # (see _recorded)
        if not (where / MANIFEST).is_file() and (target / MANIFEST).is_file():
            where = target  # the project folder moved since: the release is here, beside the run
        if where.resolve() == target.resolve() and _changelog_behind(bench_dir, target, version) \
                and not verify_release(target, recorded[0].manifest_sha256):
            # killed between the store's row and the benchmark's changelog: the rerun writes the changelog
            _write_changelog(bench_dir, _read_text(target / "CHANGELOG.md"))
            return _result_of(board, target, version, recorded[0].manifest_sha256)
        if where.resolve() == target.resolve() and _unchanged_since(board, recorded[0], target, remove):
            # the same command again, its release whole and nothing decided since (a kill after its last
            # write, or a retry): what the release is, as it said then, not an error; the folder's card made
            # where a release from before it has none
            if not (bench_dir / "README.md").is_file() and _versions(bench_dir)[-1:] == [version]:
                _write_changelog(bench_dir, _read_text(target / "CHANGELOG.md"))  # (the same, and the card)
            return replace(_result_of(board, target, version, recorded[0].manifest_sha256), resumed=False,
                           complete=True)  # fmt: skip
        if not (where / MANIFEST).is_file():
            raise BenchfillError(f"release {version} of {bench} was made by this run (its store records it at "
                                 f"{where}, which holds no release now); versions are immutable: give a new one")
        raise BenchfillError(f"release {version} of {bench} already exists (this run's store records it at "
                             f"{where}); versions are immutable")
    if target.exists():
        if not (target / MANIFEST).is_file():
            raise BenchfillError(f"{target} exists but is not a release (no {MANIFEST}); move it away")
        finished = _finish_interrupted(board, target, bench_dir, version)
        if finished is not None:
            return finished
        raise BenchfillError(f"release {version} of {bench} already exists ({target}); versions are immutable")
    _sweep_stale(bench_dir, version)
    previous = _versions(bench_dir)
    if previous and semver_key(previous[-1]) >= key:
        raise BenchfillError(f"version {version} is not newer than the latest release {previous[-1]} in {bench_dir}")
    prev_dir = bench_dir / previous[-1] if previous else None
    # After every decision and release the store holds and after the release before it, whatever this
    # machine's clock says: what a release counts as decided since the last one is read off these times
    # (board.moment_after). A clock stepped back had stamped 1.3.0 an hour before 1.2.0.
    before = parse_time(_released_at(prev_dir)) if prev_dir else None
    # Taken, held in the store and the decisions read under the run folder's lock, which every decision and
    # import takes: none can fall between the moment and the reading, and every later one is stamped after it.
    held = locks.hold(board.run_dir)
    try:
        moment = moment_after(board.store, before)
        hold_moment(board.store, moment)
        outcomes = board.outcomes()  # (once: it reads every queued item's decisions, in every run)
    finally:
        locks.release(held)
    if moment - review_board.now() > timedelta(seconds=1):
        last = f" (or release {previous[-1]})" if previous else ""
        # through logging, as every note of the library: a host's own handler decides where it goes
        log.warning("this machine's clock is behind the store's latest decision or release%s; release %s is "
                    "stamped %s so that it comes after them", last, version, moment.isoformat(timespec="seconds"),
                    extra=NOTE)
    now = moment.isoformat(timespec="seconds")
    name = run_name(board.store, board.run_dir, keep=True)
    record = _standing_scale(bench_dir, version, name) or ScaleOfRecord.from_run(board, version, name)
    prev_rows = _load_rows(prev_dir) if prev_dir else {}  # read once: checked here, carried below
    if prev_dir is not None:
        _check_originals(board, prev_rows, prev_dir.name, bench)
    rows, z_before, z_after, added = _rows(board, outcomes, version, now, record, name)
    if prev_dir is not None:  # its rows are carried into this one: an altered file would be released as ours
        _check_previous(board, prev_dir)
        _check_scale(bench_dir, prev_dir, record)
    added = _own_ids(rows, added, prev_rows, name, board.spec.get("id_field"))
    carry = carry_forward(
        rows, prev_rows, previous[-1] if previous else "",
        _released_at(prev_dir) if prev_dir else None, outcomes, remove or {}, PROVENANCE, name,
    )  # fmt: skip
    removed_before = _manifest(prev_dir).get("removed") if prev_dir else None
    kept = keep_out(rows, removed_before if isinstance(removed_before, dict) else {}, carry.removed, prev_rows,
                    outcomes, version, moment.isoformat(timespec="microseconds"), name)
    added = [i for i in (carry.aliases.get(i, i) for i in added) if i not in carry.before and i not in kept.held]
    for r in rows:  # a row carried from a release made before a column existed
        for col in PROVENANCE:
            r.setdefault(col, None)
    # An item edited in review is not the item its rollouts measured (a fixed answer key changes every
    # grade): released, marked, and left out of the after-figures.
    placed = [r for r in rows if r["origin"] == "generated" and r.get("z") is not None and not r.get("edited")]
    for r in rows:  # (a row carried from an earlier release carries the mark already)
        source = r.get("difficulty_source")
        if r["origin"] == "generated" and r.get("edited") and source and not str(source).endswith(BEFORE_EDIT):
            r["difficulty_source"] = f"{source}{BEFORE_EDIT}"
    z_after = z_before + [float(r["z"]) for r in placed]
    features, mixed = column_types(rows)  # one pass over the rows: the card's types, or the columns that mix
    meta = {
        "benchmark": bench,
        # where the original items came from, as the benchmark's spec says (docs/contracts.md)
        "source": str(board.spec.get("source") or "") or None,
        "license": board.spec.get("license") or None,  # the original items' (the spec's), for the Hub
        "citation": board.spec.get("citation") or None,
        "version": version,
        "run_id": name,
        "released_at": now,
        "n_original": len(z_before),
        "n_generated": sum(1 for r in rows if r["origin"] == "generated"),
        "release_rule": board.rule.describe(),
        "release_rule_params": board.rule.to_dict(),
        "seed": board.store.get_meta("seed"),
        "backend": board.store.get_meta("backend"),
        # what a third party needs to make the run again: the tool's version, the run's settings, and the
        # content of the files it read (files named by name only: a local path says nothing to a reader)
        "benchfill_version": __version__,
        # the code that made the run (its commit where it ran from a git checkout): one version spans many
        "run_code": board.store.get_meta("code"),
        "run_options": _run_options(board.store.get_meta("options"), board.store.get_meta("backend")),
        "inputs_sha256": _inputs(board.store),
        "models": _models(board.store.get_meta("config"), board.store.get_meta("backend")),
        # the earlier runs whose children the search read from a shared store: the settings alone do not
        # make the run again where it did
        "search_memory": _memory(board.store.get_meta("memory")),
        # A simulated run with nothing accepted still places the original items by its simulated panel's answers
        # (and may establish the benchmark's scale of record), so the card says so too.
        "simulated": any(r["simulated"] for r in rows) or simulated_run(board.store),
        "scale_of_record": record.describe(),
        # whether the run that fixed that scale was simulated (its first release's card says; this run's own
        # where it fixes it now): the originals' places, and every "before" figure, are then simulated too
        "scale_simulated": bool(_card_meta(bench_dir / record.established_in / "README.md").get("simulated")
                                if record.run_id != name else simulated_run(board.store)),
        "edited_unplaced": sum(1 for r in rows if r["origin"] == "generated" and r.get("edited")),
        # generated items whose z lies outside the gap they were made for (by the row's own numbers)
        "outside_gap": [r["id"] for r in rows if r["origin"] == "generated" and "outside_gap" in _flags_of(r)],
        "near_duplicate": [r["id"] for r in rows if r["origin"] == "generated" and "near_duplicate" in _flags_of(r)],
        "mixed_columns": mixed,
    }
    if carry.originals_moved():  # the card's scale line says the originals are not the previous release's
        meta["originals_moved"] = {"previous": carry.previous, "summary": carry.originals_summary(),
                                   "effect": originals_effect(carry.originals_added, carry.originals_removed)}
    run_k = _run_top_k(board)
    meta["run_top_k"] = run_k
    before, after = coverage_figures(z_before, run_k), coverage_figures(z_after, run_k)
    # The run report's interval and averaged figures, computed the same way (benchfill.measure.before_after).
    new_z, new_se = [float(r["z"]) for r in placed], [_se(r, record) for r in placed]
    spread = before_after(z_before, new_z, new_se, CARD_TOP_K)
    uncertain = {key: spread[key] for key in ("after_interval", "interval_level", "after_expected") if key in spread}
    if run_k is not None and run_k != CARD_TOP_K:  # the run report's top-k too, with its interval
        key, extra = f"top{run_k}_gap_sum", before_after(z_before, new_z, new_se, run_k)
        for part in ("after_interval", "after_expected"):
            if part in extra:
                uncertain[part] = {**uncertain[part], key: extra[part][key]}
    after = {**after, **uncertain}
    meta["coverage"] = {"before": before, "after": after}
    entry = changelog_entry(version, f"{now[:10]} UTC", meta["run_id"], added, meta["release_rule"], before, after,
                            outside=[i for i in added if i in meta["outside_gap"]])
    entry = _mark_simulated(entry, meta) + carry.changelog() + kept.changelog() + _rule_changed(
        board, outcomes, prev_dir, previous[-1] if previous else "", prev_rows, name)
    old_log = _read_text(bench_dir / previous[-1] / "CHANGELOG.md") if previous else ""
    changelog = entry + ("\n" + old_log.split("\n", 2)[2] if old_log.startswith("# Changelog") else "")
    changelog = f"# Changelog of {bench}\n\n{changelog}"

    tmp = Path(tempfile.mkdtemp(dir=bench_dir, prefix=f".{version}.", suffix=".tmp"))
    try:
        (tmp / "data").mkdir()
        (tmp / "plots").mkdir()
        with (tmp / DATA_FILE).open("w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        # In the dataset card's config: `datasets` caches a local folder under its base name
        # ("1.0.0") and a hash that ignores the data files, so without this two releases
        # named 1.0.0 would load each other's rows from one cache.
        meta["data_sha256"] = _sha256(tmp / DATA_FILE)
        ecdf_plot(z_before, z_after, tmp / PLOT_FILE, f"{bench} {version}")
        (tmp / "CHANGELOG.md").write_text(changelog, encoding="utf-8")
        card = dataset_card(meta, before, after, changelog.split("\n", 2)[2], features)
        (tmp / "README.md").write_text(card, encoding="utf-8")
        # released_at_us: the exact moment, so that a decision made in the same second as the release is
        # still told apart (before or after) when the next release carries items forward.
        manifest = {"benchmark": bench, "version": version, "released_at": now,
                    "released_at_us": moment.isoformat(timespec="microseconds"), "data_files": [DATA_FILE],
                    "provenance_columns": list(PROVENANCE), "files": _hashes(tmp),
                    "scale_of_record_sha256": record.sha256(bench_dir),
                    # removals still in force: a later release from the run that made them keeps them out
                    "removed": kept.removed,
                    # how the review decisions were read (review/rule.py): the next release names what another reading moves
                    "review_rule_version": RULE_VERSION}  # fmt: skip
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        digest = _sha256(tmp / MANIFEST)
        _publishable(tmp)
        # Which release this run is about to publish, committed before it appears: a rerun after a kill
        # finishes only the release this store was making (a copy of the run folder, whose store names the
        # run alike, had taken its twin's release for its own interrupted one)
        board.store.set_meta(PUBLISHING_META, {"version": version, "manifest_sha256": digest})
        # The store's row is written (flushed, which takes the store's write lock) before the release
        # appears and committed after: a store that cannot take it (read-only, full) fails the release with
        # nothing published, and a kill between the rename and the commit leaves what _finish_interrupted
        # records on the rerun.
        with board.store.session() as s:
            s.add(Release(run_id=board.store.run_id, version=version, path=str(target.resolve()),
                          manifest_sha256=digest, created_at=moment))  # the moment its files carry
            _keep_removals(s, board.store.run_id, kept.removed)
            s.flush()
            # The first release of a benchmark fixes its scale (later ones reuse it): written before the
            # release appears, so that no release stands without it, and taken back if the rename fails.
            fixed = record.write(bench_dir)
            try:
                tmp.rename(target)  # atomic; fails if the version appeared meanwhile
            except BaseException:
                # taken back only if the release did not appear: a Ctrl-C landing just after the rename had
                # deleted the scale of a release that stands, and the next release was refused for it
                if fixed and tmp.exists():
                    (bench_dir / ScaleOfRecord.FILE).unlink(missing_ok=True)
                raise
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            named(exc, target)  # a full disk's write names no file
        raise
    board.store.set_meta(PUBLISHING_META, None)
    _write_changelog(bench_dir, changelog)
    pending = _pending(outcomes, rows, name)
    note = ""
    if board.kept_rule is not None and board.rule != board.kept_rule:
        note = (f"released under the rule given ({board.rule.describe()}), not the one the review page was "
                f"served with ({board.kept_rule.describe()})")
    return ReleaseResult(version, target, len(z_before), meta["n_generated"], digest,
                         added=added, carried=carry.carried, removed=list(carry.removed),
                         changed=carry.changed, pending=pending, rule_note=note, held=kept.held,
                         same_text=_same_texts(rows, str(board.spec.get("text_field") or "")),
                         originals=_originals_of(carry.originals_added, carry.originals_removed,
                                                 carry.originals_changed))  # fmt: skip


def _mark_simulated(entry: str, meta: dict[str, Any]) -> str:
    """A changelog entry with its figures marked simulated where they are, as the version's card marks them: the
    benchmark's CHANGELOG.md, and every later version's, carry the entry away from the card that says so."""
    if meta.get("simulated"):
        line = (f"- {SIMULATED}: made from a run on the simulated world; its items' places, any generated item "
                "and every figure below are simulated, not a model's\n")
    elif meta.get("scale_simulated"):
        line = (f"- {SIMULATED} scale: the original items' places, and so every \"before\" figure below, come "
                "from a fit a simulated probe panel's answers joined\n")
    else:
        return entry
    head, rest = entry.split("\n\n", 1)
    return f"{head}\n\n{line}{rest}"


def _originals_of(added: list[str], removed: list[str], changed: dict[str, list[str]]) -> dict[str, Any]:
    """``ReleaseResult.originals``: {} where the original items are the previous release's."""
    return {"added": added, "removed": removed, "changed": changed} if added or removed or changed else {}


def _same_texts(rows: list[dict[str, Any]], text_field: str) -> list[tuple[str, str]]:
    """Generated rows whose text another row of the release already has, compared as a reader would (NFC,
    runs of spaces as one, case folded): a reviewer's edit can make a child a copy of an original, which the
    search's near-duplicate check never saw."""
    import unicodedata

    first: dict[str, str] = {}
    out = []
    for r in sorted(rows, key=lambda r: r.get("origin") != "original"):  # an original is the one copied
        text = r.get(text_field) if text_field else None
        if not isinstance(text, str):
            continue
        key = " ".join(unicodedata.normalize("NFC", text).split()).casefold()
        if key in first and r.get("origin") == "generated":
            out.append((str(r["id"]), first[key]))
        first.setdefault(key, str(r["id"]))
    return out


def _rows(board: ReviewBoard, outcomes: dict, version: str, now: str, record: ScaleOfRecord, name: str
          ) -> tuple[list[dict], list[float], list[float], list[str]]:
    fit = _run_fit(board)
    to_record = record.mapping(fit, board.run_dir, name)
    pos = {item_id: i for i, item_id in enumerate(fit.item_ids)}
    b_rec = [record.b.get(i, to_record(float(b))) for i, b in zip(fit.item_ids, fit.difficulty, strict=True)]
    z = [record.z(b) for b in b_rec]
    run_span = float(fit.b_max - fit.b_min)
    stretch = abs(to_record(1.0) - to_record(0.0))  # how the map onto the record scales a standard error

    def z_on_record(zr: float | None) -> float | None:
        """A z of the run's fit on the record, through the map the difficulties take."""
        return None if zr is None else record.z(to_record(float(fit.b_min) + float(zr) * run_span))

    def est_on_record(est: dict[str, Any]) -> dict[str, Any]:
        """An estimate of the run (difficulty, se, z, placement_z_se) on the scale of record, z_se added."""
        if est.get("difficulty") is None and est.get("z") is None:
            return {**est, "z_se": None}
        b = to_record(float(est["difficulty"]) if est.get("difficulty") is not None
                      else float(fit.b_min) + float(est["z"]) * run_span)
        # A record from before placement_z_se carries the sampling se alone.
        pz = est.get("placement_z_se")
        pz = float(est["se"]) / run_span if pz is None and est.get("se") is not None and run_span > 0 else pz
        return {**est, "difficulty": b, "z": record.z(b),
                "se": None if est.get("se") is None else float(est["se"]) * stretch,
                "z_se": None if pz is None else record.z_se(float(pz) * run_span * stretch)}
    with board.store.session() as s:
        originals = list(s.exec(board.store.select(Item, Item.origin == "original")))
    if not originals:
        raise DataError(f"{board.run_dir}: no original items in the run's store")
    originals.sort(key=lambda it: pos.get(it.id, len(pos)))
    base = dict.fromkeys(PROVENANCE)
    base.update({"probe_panel": "[]", "probe_results": "[]", "flags": "[]", "reviews": "[]", "edited": False,
                 "simulated": False, "run_id": name, "released_in": version,
                 "released_at": now})  # fmt: skip
    rows, z_before = [], []
    own: dict[str, dict[str, Any]] = {}  # original item id -> its fields
    for it in originals:
        fields = own[it.id] = _fields(it.id, json.loads(it.data_json))
        row = {**fields, **base, "origin": "original", "proposed_at": None}
        if it.id in pos:
            i = pos[it.id]
            se = float(fit.difficulty_se[i]) * stretch
            row.update(difficulty=float(b_rec[i]), difficulty_se=se, z=float(z[i]), z_se=record.z_se(se),
                       difficulty_source="irt_fit")  # fmt: skip
            z_before.append(float(z[i]))
        rows.append(row)
    z_after, added = list(z_before), []
    for item_id, res in outcomes.items():
        if not res.released:
            continue
        rec = board.entry(item_id).record
        # Every difficulty and z of the row on the scale of record, as the originals': the run's own scale
        # differs from it wherever this run is not the record's.
        ann = est_on_record(rec.get("annotated") or {})
        conf = est_on_record(rec.get("confirmed") or {})
        gap = rec.get("gap") or {}
        best, source = (conf, "confirmed") if conf.get("z") is not None else (ann, "annotated")
        # The gap's edges go through the same map as the target and the estimates, not to where the record puts
        # the two originals that bound it: the record's fit places those originals a little off that map (two
        # fits disagree item by item), far enough to swap neighbours, and a row then flagged the wrong child, its
        # target outside its own gap. Mapped alike, the child, its target and its edges keep the order the run
        # measured them in (one panel's fit), and the flag agrees with the report and the review queue.
        edges = sorted(e for e in (z_on_record(gap.get("left")), z_on_record(gap.get("right"))) if e is not None)
        gap_left, gap_right = (edges[0], edges[1]) if len(edges) == 2 else (None, None)
        flags = list(rec.get("flags") or [])
        if best.get("z") is not None and gap_left is not None:  # outside its gap by the row's own numbers
            flags = [f for f in flags if f != "outside_gap"]
            if not gap_left < best["z"] < gap_right:
                flags.append("outside_gap")
        ancestor = own.get(rec["ancestor_id"]) or rec.get("ancestor")
        fields = _key_index(_fields(item_id, res.edited_fields or rec["child"], ancestor), ancestor,
                            rec.get("answer_field"))
        reviews = [{"reviewer": d.reviewer, "decision": d.decision, "reason": d.reason,
                    "at": d.created_at.isoformat(timespec="seconds")} for d in res.decisions]  # fmt: skip
        row = {**fields, **base}
        row.update(
            origin="generated", ancestor_id=rec["ancestor_id"], gap_index=rec.get("gap_index"),
            gap_left=gap_left, gap_right=gap_right, target_z=z_on_record(rec.get("target_z")),
            difficulty=best.get("difficulty"), difficulty_se=best.get("se"), z=best.get("z"), z_se=best.get("z_se"),
            difficulty_source=source,
            annotated_difficulty=ann.get("difficulty"), annotated_se=ann.get("se"), annotated_z=ann.get("z"),
            confirmed_difficulty=conf.get("difficulty"), confirmed_se=conf.get("se"), confirmed_z=conf.get("z"),
            probe_panel=json.dumps(rec.get("probe_panel") or []), probe_results=json.dumps(rec.get("probe_results") or []),
            rewriter_model=rec.get("rewriter_model"), judge_model=rec.get("judge_model"),
            judge_reason=(rec.get("judge") or {}).get("reason"), flags=json.dumps(flags),
            reviews=json.dumps(reviews, ensure_ascii=False), edited=res.edited_fields is not None,
            edited_by=res.edited_by,
            original_fields=json.dumps(rec["child"], ensure_ascii=False) if res.edited_fields else None,
            simulated=bool(rec.get("simulated")), true_difficulty=_true_on_record(rec, to_record, fit),
            proposed_at=rec.get("created_at"),
        )  # fmt: skip
        rows.append(row)
        added.append(item_id)
        if best.get("z") is not None:
            z_after.append(float(best["z"]))
    return rows, z_before, z_after, added


def _true_on_record(rec: dict[str, Any], to_record, fit) -> float | None:
    """A simulated item's true difficulty on the scale of record: the record's fitted-scale truth (``true_z``,
    ``true_difficulty``, benchfill.report) mapped as its estimates are. A record written before holds the
    world's own latent scale only, which maps onto no fit: None."""
    if "true_z" not in rec:
        return None
    b = rec.get("true_difficulty")
    if b is None and rec.get("true_z") is not None:
        b = float(fit.b_min) + float(rec["true_z"]) * float(fit.b_max - fit.b_min)
    return None if b is None else to_record(float(b))


def _flags_of(row: dict[str, Any]) -> list[str]:
    """A release row's flags (a JSON-encoded list; a carried row from an older release may hold anything)."""
    try:
        flags = json.loads(row.get("flags") or "[]")
    except (TypeError, ValueError):
        return []
    return [str(f) for f in flags] if isinstance(flags, list) else []


def _run_top_k(board: ReviewBoard) -> int | None:
    """The run's --gaps, the k of its report's top-k gap sum (None where the run recorded no options)."""
    opts = board.store.get_meta("options")
    k = opts.get("gaps") if isinstance(opts, dict) else None
    return k if isinstance(k, int) and not isinstance(k, bool) and k >= 1 else None


def _own_ids(rows: list[dict], added: list[str], previous: dict[str, dict], name: str,
             id_field: str | None = None) -> list[str]:
    """Give this run's generated items that share an id with another run's item of the previous release
    the id ``<id>@<run>`` (in ``rows``, in place; returns ``added`` renamed alike).

    A run names its children by gap, round, parent and child ("bf-g0-r1-p0-c0"), so two runs on one
    benchmark name different items alike; matched by id, the second run's item replaced the first's as
    a "changed" item. The same rule on every release keeps the new id stable: a later release from this
    run meets the same clash and finds its item again under ``<id>@<run>``."""
    renamed = {}
    for r in rows:
        if r["origin"] != "generated":
            continue
        prev, alias = previous.get(r["id"]), f"{r['id']}{RUN_SEP}{name}"
        clash = prev is not None and prev.get("origin") == "generated" and prev.get("run_id") not in (None, name)
        # Released under the alias before, it keeps it once the clash is gone (the other run's item removed):
        # under its bare id it would come back as a second copy beside the one carried forward.
        kept = (previous.get(alias) or {}).get("run_id") == name
        if clash or kept:
            # the item's own id columns (a spec's id_field, a dataset's task_id) hold its id too: renamed
            # alike, or two rows of the release shared one there
            for key in [k for k, v in r.items() if k != "id" and k not in PROVENANCE and v == r["id"]
                        and (k in ID_COLUMNS or k == id_field)]:
                r[key] = alias
            renamed[r["id"]] = r["id"] = alias
    return [renamed.get(i, i) for i in added]


def _se(row: dict[str, Any], record: ScaleOfRecord) -> float:
    """A released item's z standard error; a row from a release made before z_se carries its sampling se."""
    if row.get("z_se") is not None:
        return float(row["z_se"])
    return 0.0 if row.get("difficulty_se") is None else record.z_se(float(row["difficulty_se"]))


def _run_fit(board: ReviewBoard):
    """The fit the run recorded in its store. Its folder's fit.json is a copy for the user, which a command
    may replace (``benchfill fit`` run in the folder writes fit.json by default): read only from a store of
    a run that recorded no fit there."""
    from benchfill.irt.fit import IrtFit

    saved = board.store.get_meta("fit")
    if saved:
        return IrtFit.from_dict(saved, source=f"{board.run_dir}: the fit its store recorded")
    fit_path = board.run_dir / "fit.json"
    if not fit_path.is_file():
        raise DataError(f"{fit_path}: the run has no IRT fit of the original benchmark")
    return IrtFit.load(fit_path)


@dataclass
class ScaleOfRecord:
    """One difficulty scale per benchmark: the IRT fit of the run its first release came from.

    Every later release, whatever run it comes from, places the original items where the record has
    them (so the same items give the same "before" figures in every release) and maps a new run's
    difficulties onto the record by the mean/sigma link over the original items both fits share, refused
    where they correlate less than the search memory's MIN_CORRELATION."""

    b: dict[str, float]  # original item id -> difficulty on the record's logit scale
    b_min: float
    b_max: float
    run_id: str
    established_in: str
    shared: int = 0
    intercept: float = 0.0
    slope: float = 1.0

    FILE = "scale_of_record.json"

    @classmethod
    def read(cls, bench_dir: Path) -> ScaleOfRecord | None:
        path = bench_dir / cls.FILE
        if not path.is_file():
            return None
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
            return cls({str(k): float(v) for k, v in d["b"].items()}, float(d["b_min"]), float(d["b_max"]),
                       str(d["run_id"]), str(d["established_in"]))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:  # (nested too deeply)
            raise DataError(f"{path}: not a scale of record ({exc})") from None

    @classmethod
    def from_run(cls, board: ReviewBoard, version: str, name: str | None = None) -> ScaleOfRecord:
        fit = _run_fit(board)
        b = {i: float(v) for i, v in zip(fit.item_ids, fit.difficulty, strict=True)}
        return cls(b, float(fit.b_min), float(fit.b_max), name or board.run_dir.resolve().name, version)

    def z(self, b: float) -> float:
        span = self.b_max - self.b_min
        return 0.5 if span <= 0 else (b - self.b_min) / span

    def z_se(self, se: float) -> float:
        """A standard error of b on the record, in z."""
        span = self.b_max - self.b_min
        return 0.0 if span <= 0 else se / span

    def mapping(self, fit, run_dir: Path, name: str | None = None):
        """b on this run's fit -> b on the record (the identity for the record's own run, ``name``)."""
        if (name or run_dir.resolve().name) == self.run_id:
            self.shared = len(self.b)
            return lambda b: b
        from benchfill.engine.memory_store import mean_sigma_link

        then = {i: float(v) for i, v in zip(fit.item_ids, fit.difficulty, strict=True) if i in self.b}
        link = mean_sigma_link("run", then, {i: self.b[i] for i in then}, min_shared=3)  # a small benchmark too
        if isinstance(link, str):
            # A least-squares line had mapped any fit at all: one that correlated -0.004 with the record (another
            # simulated world) put its child at the record's middle with a 280-fold smaller se, as filling a gap
            raise DataError(f"{run_dir}: its fit cannot be mapped onto the scale of record of run {self.run_id}: "
                            + link.replace("the current fit", "the record")
                            + "; the two fits do not measure these items alike (another simulated world or probe "
                            "panel, or another benchmark under this name): release it under another benchmark "
                            "name (its spec's name, or another --out)")  # fmt: skip
        # the mean/sigma link, as the search memory links two fits (docs/memory.md): a least-squares slope
        # shrinks by the correlation, and would pull every mapped item toward the record's mean
        self.slope, self.intercept = float(link.a), float(link.b)
        self.shared = len(then)
        return lambda b: self.intercept + self.slope * b

    def describe(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "established_in": self.established_in, "b_min": self.b_min,
                "b_max": self.b_max, "shared_items": self.shared, "intercept": self.intercept, "slope": self.slope}

    def content(self) -> bytes:
        return json.dumps({"b": self.b, "b_min": self.b_min, "b_max": self.b_max, "run_id": self.run_id,
                           "established_in": self.established_in}, indent=1).encode("utf-8")

    def sha256(self, bench_dir: Path) -> str:
        """The sha256 of the benchmark's scale file as this release places its items on it: the file's, or,
        for the first release, the one it is about to write. Each manifest keeps it, so an edited file is
        caught by the next release and by ``release verify`` (it moves every "before" figure)."""
        path = bench_dir / self.FILE
        return _sha256(path) if path.is_file() else hashlib.sha256(self.content()).hexdigest()

    def write(self, bench_dir: Path) -> bool:
        """Write the scale of record unless the benchmark has one; True if this call wrote it."""
        path = bench_dir / self.FILE
        if path.exists():
            return False
        tmp = bench_dir / f".{self.FILE}.tmp"
        tmp.write_bytes(self.content())
        tmp.chmod(0o644)
        tmp.replace(path)
        return True


def _standing_scale(bench_dir: Path, version: str, name: str) -> ScaleOfRecord | None:
    """The benchmark's scale of record, or None where it has none yet. A scale whose release never appeared
    (the file is written just before the release's folder is renamed into place, and a kill can land
    between) is no scale: it is removed, under the benchmark's lock, and the release being made fixes its
    own. Kept, it had been taken for the benchmark's by the next run to release, whose card then named a
    run that released nothing."""
    record = ScaleOfRecord.read(bench_dir)
    if record is None or record.established_in in _versions(bench_dir):
        return record
    if (record.run_id, record.established_in) != (name, version):
        log.warning("%s: the scale of record of release %s of run %s, which never appeared (a release "
                    "killed before it did), is set aside; this release fixes the scale", bench_dir / ScaleOfRecord.FILE,
                    record.established_in, record.run_id, extra=NOTE)
    (bench_dir / ScaleOfRecord.FILE).unlink(missing_ok=True)
    return None


def _keep_removals(s: Any, run_id: str, removed: dict[str, Any]) -> None:
    """The removals in force after this release (its manifest's ``removed``), kept in the store beside its row
    (``REMOVED_META``), as (the run that made the item, the id it gave it, when): the search memory of a
    shared store reads them, so that a later run neither reuses nor parents an item a reviewer took out of a
    release (three runs had reused one and called its gap filled)."""
    from benchfill.engine.memory_store import REMOVED_META
    from benchfill.release_carry import _made_as
    from benchfill.schema import RunMeta

    items = sorted([*_made_as(str(i), e.get("run_id")), str(e.get("removed_at") or "")]
                   for i, e in removed.items() if isinstance(e, dict))  # fmt: skip
    s.merge(RunMeta(run_id=run_id, key=REMOVED_META, value_json=json.dumps(items)))


def _check_originals(board: ReviewBoard, prev_rows: dict[str, dict], prev_version: str, bench: str) -> None:
    """A run on a release's own data (``--items .../data/test.jsonl``) under the benchmark's name: the items
    that release generated came back as originals, with no reviews, placed as the record's own, and moved
    the "before" figures that every release of a benchmark shares."""
    with board.store.session() as s:
        mine = {it.id for it in s.exec(board.store.select(Item, Item.origin == "original"))}
    back = [i for i, r in prev_rows.items() if r.get("origin") == "generated" and i in mine]
    if back:
        raise BenchfillError(f"{board.run_dir}: {len(back)} of its benchmark's items are generated items of release "
                             f"{prev_version} of {bench} ({', '.join(back[:3])}{', ...' if len(back) > 3 else ''}): "
                             "a benchmark made from a release is another benchmark; give its spec another name, or "
                             "release it into another --out")  # fmt: skip


def _check_scale(bench_dir: Path, prev_dir: Path, record: ScaleOfRecord) -> None:
    """The scale file must be the one the latest release was placed on (a manifest from before this was
    kept holds none): edited, it would move every original item's z, and "the same before figures in every
    release" would silently stop holding."""
    try:
        kept = json.loads((prev_dir / MANIFEST).read_text(encoding="utf-8")).get("scale_of_record_sha256")
    except (OSError, ValueError, AttributeError, RecursionError):
        return  # _check_previous has refused an unreadable manifest
    if kept and (now := record.sha256(bench_dir)) != kept:
        raise BenchfillError(f"{bench_dir / ScaleOfRecord.FILE}: sha256 {now[:16]}... is not the one release "
                             f"{prev_dir.name} was placed on ({kept[:16]}...): the file was edited; restore it, "
                             "since every release places the original items by it")


def _check_previous(board: ReviewBoard, prev_dir: Path) -> None:
    """Refuse to build on a release whose data or changelog (what this one reads from it) no longer match
    its manifest, or, where this run's store recorded it, whose manifest is not the one recorded. Other
    files (a desktop's .DS_Store) are not this release's business: ``release verify`` names them."""
    mpath = prev_dir / MANIFEST
    try:
        listed = json.loads(mpath.read_text(encoding="utf-8")).get("files") or {}
    except (OSError, ValueError, AttributeError, RecursionError):
        listed = None
    problems = [] if isinstance(listed, dict) else [f"{mpath}: missing or unreadable"]
    for name in (DATA_FILE, "CHANGELOG.md") if not problems else ():
        info, path = listed.get(name), prev_dir / name
        if not isinstance(info, dict) or path.is_symlink() or not path.is_file() or _sha256(path) != info.get("sha256"):
            problems.append(f"{path}: does not match its manifest (modified or missing)")
    recorded = _recorded(board.store.all(Release), prev_dir, run_name(board.store, board.run_dir)) \
        if not problems else None
    if not problems and recorded is not None and _sha256(mpath) != recorded.manifest_sha256:
        problems.append(f"{mpath}: not the manifest this run recorded for {prev_dir.name} (rewritten)")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise BenchfillError(f"the latest release, which this one would carry forward, does not verify: "
                             f"{problems[0]}{more}; restore it (benchfill release verify {prev_dir})")


def _recorded(rows: list, release_dir: Path, name: str):
    """The store's row of the release at ``release_dir``, or None. A row written before paths were kept
    absolute holds the path as given, relative to a folder no longer known, and a project folder may have
    moved since its release (the "rewritten" check had then stopped without a word): matched by its
    benchmark and version (one run releases a version once), where the release's own rows say the run
    ``name`` made it."""
    want = release_dir.resolve()
    same = [r for r in rows if Path(r.path).is_absolute() and Path(r.path).resolve() == want]
    if same:
        return same[0]
    alike = [r for r in rows if Path(r.path).parts[-2:] == want.parts[-2:]]
    made = alike and any(r.get("released_in") == want.name and r.get("run_id") == name
                         for r in _load_rows(release_dir).values())
    return alike[0] if made else None


def _inputs(store) -> dict[str, str] | None:
    """The sha256 of every file the run read: its inputs, and the panel config (recorded apart)."""
    files = store.get_meta(INPUTS_META)
    config = store.get_meta("config_sha256")
    if config:
        files = {**(files or {}), "config": config}
    return files


def _models(config: Any, backend: Any) -> dict[str, Any] | None:
    """The models a real run asked and how (no endpoint: a URL may name a host of the user's own network);
    None for a simulated run, whose world the run's options describe."""
    if not isinstance(config, dict) or backend == "sim":
        return None
    keep = ("model", "temperature", "top_p", "max_tokens", "trials")
    probes = [{k: p.get(k) for k in ("name", *keep) if k in p} for p in config.get("probes") or []
              if isinstance(p, dict)]
    roles = {r: {k: v for k, v in (config.get(r) or {}).items() if k in keep}
             for r in ("rewriter", "judge") if isinstance(config.get(r), dict)}
    return {"probes": probes, **roles} if probes or roles else None


def _memory(memory: Any) -> dict[str, Any] | None:
    if not isinstance(memory, dict) or not memory.get("earlier_runs"):
        return None
    return {"earlier_runs": memory["earlier_runs"],
            "entries_from_earlier_runs": memory.get("entries_from_earlier_runs"),
            "gaps_reused": memory.get("gaps_reused")}


def _run_options(options: Any, backend: Any = None) -> dict[str, Any] | None:
    """The run's recorded settings for the card, its file options by file name. ``extra`` (a library
    caller's, a sweep's ``anchor_items``) is part of the run id, and so of the card."""
    if not isinstance(options, dict):
        return None
    out = dict(options)
    if backend == "sim" and out.get("sim_rewriter", "") is None:  # None is the default preset: named
        from benchfill.sim.rewriter import DEFAULT_PRESET

        out["sim_rewriter"] = DEFAULT_PRESET
    from benchfill import hub

    for k in ("items", "responses", "spec", "config"):
        if isinstance(out.get(k), str) and not out[k].startswith("hf:"):
            out[k] = Path(out[k]).name
        elif isinstance(out.get(k), str):  # a local folder read as a dataset: its name, not its path
            try:
                out[k] = hub.parse(out[k]).public()
            except DataError:
                out[k] = "hf:"
    return out


def _released_at(path: Path) -> str | None:
    m = _manifest(path)
    return m.get("released_at_us") or m.get("released_at")


STALE_S = 3600  # a release's temp folder untouched this long was left by a killed release


def _sweep_stale(bench_dir: Path, version: str) -> None:
    """Remove the temp folders of releases killed while building (``.<version>.<random>.tmp``): those of
    this version (a rerun of the command that left them), and others untouched for ``STALE_S`` (a release
    of another version in progress keeps writing to its own)."""
    if not bench_dir.is_dir():
        return
    cutoff = datetime.now(UTC).timestamp() - STALE_S
    for p in bench_dir.glob(".*.tmp"):
        if p.is_dir() and (p.name.startswith(f".{version}.") or p.stat().st_mtime < cutoff):
            shutil.rmtree(p, ignore_errors=True)


def _finish_interrupted(board: ReviewBoard, target: Path, bench_dir: Path, version: str) -> ReleaseResult | None:
    """A release this run published whose command was killed before it recorded it (the folder is renamed
    into place first, then the store's row and the benchmark's changelog are written): verified against
    its manifest and made by this run, it is recorded now, and the rerun of the command ends as the
    uninterrupted one would have. None where the folder is another's, or does not verify."""
    if verify_release(target):
        return None
    name = run_name(board.store, board.run_dir)
    rows = list(_load_rows(target).values())
    mine = [r for r in rows if r.get("released_in") == version]
    if not mine or any(r.get("run_id") != name for r in mine):
        return None
    digest = _sha256(target / MANIFEST)
    if board.store.get_meta(PUBLISHING_META) != {"version": version, "manifest_sha256": digest}:
        return None  # not the release this store was publishing: another copy of the run made it
    with board.store.session() as s:
        made = parse_time(_released_at(target))  # the moment its files carry, where they say it
        s.add(Release(run_id=board.store.run_id, version=version, path=str(target.resolve()), manifest_sha256=digest,
                      **({"created_at": made} if made is not None else {})))
        removed = _manifest(target).get("removed")
        _keep_removals(s, board.store.run_id, removed if isinstance(removed, dict) else {})
    board.store.set_meta(PUBLISHING_META, None)
    _write_changelog(bench_dir, _read_text(target / "CHANGELOG.md"))
    _sweep_stale(bench_dir, version)
    return _result_of(board, target, version, digest, rows)


def _unchanged_since(board: ReviewBoard, recorded: Release, target: Path, remove: dict[str, str] | None) -> bool:
    """Whether a release this run made at ``target`` is the one the same command would make now: it is the
    benchmark's latest, verifies against the sha256 the store recorded, the changelog is its own, the rule is
    the one it was made under, the removals asked are the ones it made, and no decision on this run's items
    (here or in another run on the store) came after the moment it read them."""
    if _versions(target.parent)[-1:] != [recorded.version] or _changelog_behind(target.parent, target,
                                                                                 recorded.version):  # fmt: skip
        return False  # a later release stands: the command would now be refused as not newer
    if verify_release(target, recorded.manifest_sha256):
        return False
    if _card_meta(target / "README.md").get("release_rule_params") != board.rule.to_dict():
        return False
    if _removed_in(target) != dict(remove or {}):
        return False
    stamp = _manifest(target).get("released_at_us")
    try:  # the moment it read the decisions (the store's row is written after the files are built)
        made = as_utc(datetime.fromisoformat(stamp)) if isinstance(stamp, str) else as_utc(recorded.created_at)
    except ValueError:
        made = as_utc(recorded.created_at)
    return not any(as_utc(d.created_at) > made for d in board.store.all(ReviewDecision) + board._elsewhere())


def _removed_in(target: Path) -> dict[str, str]:
    """The items the release at ``target`` removed from its previous one, with why (its manifest's record)."""
    removed = _manifest(target).get("removed")
    return {str(i): str(e.get("why")) for i, e in (removed.items() if isinstance(removed, dict) else [])
            if isinstance(e, dict) and e.get("removed_in") == target.name}  # fmt: skip


def _changelog_behind(bench_dir: Path, target: Path, version: str) -> bool:
    """Whether the benchmark's changelog is not yet the one of ``version``, its latest release."""
    if _versions(bench_dir)[-1:] != [version]:
        return False  # a later release wrote it since
    top = bench_dir / "CHANGELOG.md"
    mine = target / "CHANGELOG.md"
    return mine.is_file() and (not top.is_file() or top.read_bytes() != mine.read_bytes())


def _result_of(board: ReviewBoard, target: Path, version: str, digest: str,
               rows: list[dict] | None = None) -> ReleaseResult:
    """The result of a release that an interrupted command published, as its rerun reports it."""
    rows = list(_load_rows(target).values()) if rows is None else rows
    gen = [r for r in rows if r.get("origin") == "generated"]
    pending = _pending(board.outcomes(), rows, run_name(board.store, board.run_dir))
    earlier = [v for v in _versions(target.parent) if semver_key(v) < semver_key(version)]
    # said again by the rerun that finishes it, as the interrupted command would have
    originals = _originals_of(*original_changes(rows, _load_rows(target.parent / earlier[-1]), PROVENANCE)) \
        if earlier else {}
    return ReleaseResult(version, target, sum(r.get("origin") == "original" for r in rows), len(gen), digest,
                         added=[r["id"] for r in gen if r.get("released_in") == version],
                         carried=[r["id"] for r in gen if r.get("released_in") != version], pending=pending,
                         removed=list(_removed_in(target)), resumed=True, originals=originals)


def _pending(outcomes: dict, rows: list[dict], name: str) -> list[str]:
    """This run's items still awaiting review that the release does not hold: one carried forward from the
    previous release (under its own id or ``<id>@<run>``) is in it, pending or not."""
    held = {r["id"] for r in rows if r.get("origin") == "generated"}
    return [i for i, o in outcomes.items()
            if o.status == "pending" and i not in held and f"{i}{RUN_SEP}{name}" not in held]


def _write_changelog(bench_dir: Path, text: str) -> None:
    """The benchmark's top-level CHANGELOG.md (the latest release's) and its folder's card (``root_card``),
    each replaced atomically."""
    # the card first: a rerun after a kill between the two sees the changelog behind and writes both again
    for name, content in (("README.md", root_card(bench_dir)), ("CHANGELOG.md", text)):
        tmp = bench_dir / f".{name}.tmp"
        try:
            tmp.write_text(content, encoding="utf-8")
            tmp.chmod(0o644)
            tmp.replace(bench_dir / name)
        except OSError as exc:
            named(exc, bench_dir / name)
            raise
        finally:
            tmp.unlink(missing_ok=True)


def root_card(bench_dir: Path) -> str:
    """The card of a benchmark's release folder: one `datasets` config per version, the latest the default.

    Pushed whole as one Hub repository (``releases/<benchmark>/``), the folder had loaded every version's
    rows into one split: each item once per version, or a cast error where two versions typed a column
    differently. With this card, ``load_dataset(DIR)`` gives the latest and ``load_dataset(DIR, "1.0.0")``
    that version; each version's own folder keeps its own card.

    A README.md the maintainer wrote there is kept: its front matter's own keys (``configs`` is benchfill's)
    and its text, with the list of versions written between two markers, which later releases rewrite."""
    import yaml

    bench, versions = bench_dir.name, _versions(bench_dir)[::-1]
    configs, cards = [], {v: _card_meta(bench_dir / v / "README.md") for v in versions}
    for v in versions:
        # the card's own data_sha256 (each version's data is not hashed again at every release), hashed here
        # only for a card from before the field
        data = bench_dir / v / DATA_FILE
        sha = cards[v].get("data_sha256") or (_sha256(data) if data.is_file() else "")
        # the data's sha256 in the description: `datasets` keys its cache of a local folder by name, not data
        configs.append({"config_name": v, "description": f"{bench} {v} data sha256 {sha}",
                        "data_files": [{"split": "test", "path": f"{v}/{DATA_FILE}"}],
                        **({"default": True} if v == versions[0] else {})})
    pretty = f"{bench} (benchfill releases)"
    latest = _front_matter(bench_dir / versions[0] / "README.md")[0] if versions else {}
    # the Hub reads the licence of a repository from its top card: the latest version's, as its spec states it
    licence = {k: latest[k] for k in ("license", "license_name") if k in latest}
    header: dict[str, Any] = {"pretty_name": pretty, "tags": ["benchfill", "difficulty", "irt"], **licence}
    listed = "\n".join(f"- [{v}]({v}/README.md)" + (" (latest)" if v == versions[0] else "") for v in versions)
    # the folder's landing page on the Hub: a reader who never opens a version's card is told which are simulated
    sim = [v for v in versions if cards[v].get("simulated")]
    scale = [v for v in versions if not cards[v].get("simulated") and cards[v].get("scale_simulated")]
    if sim or scale:
        said = [f"{_and(sim)} {'comes' if len(sim) == 1 else 'come'} from a run on the simulated world (items' places, "
                "any generated item and every figure simulated, not a model's)"] if sim else []
        said += [f"{_and(scale)} {'rests' if len(scale) == 1 else 'rest'} on a scale of record a simulated probe "
                 "panel's answers joined (every \"before\" figure simulated)"] if scale else []
        listed = f"> {SIMULATED}: {'; '.join(said)}. Each version's card says more.\n\n{listed}"
    block = f"""{_ROOT_BEGIN}
Each version is a folder of its own, immutable once made: its card (`README.md`, with the coverage figures
and what every column means), its data (`{DATA_FILE}`), its changelog and its manifest. `datasets.load_dataset`
on this folder gives the latest version; name another as the configuration: `load_dataset(DIR, "{versions[-1] if versions else "1.0.0"}")`.
Check a version's files with `benchfill release verify DIR/VERSION` (a downloaded copy: add `--copy`).

{listed}

`CHANGELOG.md` holds every version's changes, the latest first.
{_ROOT_END}"""
    body = f"# {bench}: benchfill releases\n\n{block}\n"
    own, text = _front_matter(bench_dir / "README.md")
    own = {k: v for k, v in own.items() if v is not None}  # (`tags:` left empty is no tags of the maintainer's)
    if text.strip() and not _old_card(text, bench):
        if _ROOT_BEGIN in text and _ROOT_END in text.split(_ROOT_BEGIN, 1)[1]:
            head, rest = text.split(_ROOT_BEGIN, 1)
            body = head + block + rest.split(_ROOT_END, 1)[1]
        else:  # the maintainer's own README: kept whole, the versions after it
            body = f"{text.rstrip()}\n\n## benchfill releases\n\n{block}\n"
    # the maintainer's front matter keys are kept whatever the text (a card from before the markers too), but
    # the licence, which follows the latest version's spec where it states one (the card's own earlier
    # licence had stayed for good)
    if licence:
        own = {k: v for k, v in own.items() if k not in ("license", "license_name")}
    tags = [*own.get("tags", []), *(t for t in header["tags"] if t not in own.get("tags", []))] \
        if isinstance(own.get("tags"), list) else own.get("tags", header["tags"])
    header = {**header, **own, "tags": tags, "configs": configs}
    return f"""---
{yaml.safe_dump(header, sort_keys=False, allow_unicode=True).rstrip()}
---

{body.lstrip(chr(10))}"""


def _old_card(text: str, bench: str) -> bool:
    """Whether ``text`` is the folder card's as a release before the markers wrote it, word for word but its
    list of versions (then replaced whole; any other text is the maintainer's, and kept)."""
    # a version's line (a link of one's own, `- [examples](examples/README.md)`, is text)
    version_line = re.compile(r"- \[(\d+\.\d+\.\d+[^\]\s]*)\]\(\1/README\.md\)( \(latest\))?")

    def bare(t: str) -> str:
        t = "\n".join(line for line in t.splitlines()
                      if not (line.startswith(("<!-- benchfill", f"> {SIMULATED}:"))
                              or version_line.fullmatch(line.strip())))
        return " ".join(re.sub(r'load_dataset\(DIR, "[^"]*"\)', "", t).split())

    generated = (f"# {bench}: benchfill releases\n\nEach version is a folder of its own, immutable once made: its "
                 f"card (`README.md`, with the coverage figures\nand what every column means), its data "
                 f"(`{DATA_FILE}`), its changelog and its manifest. `datasets.load_dataset`\non this folder gives the "
                 f"latest version; name another as the configuration: `load_dataset(DIR, \"1.0.0\")`.\nCheck a "
                 f"version's files with `benchfill release verify DIR/VERSION` (a downloaded copy: add `--copy`).\n\n"
                 f"`CHANGELOG.md` holds every version's changes, the latest first.\n")
    return bare(text) == bare(generated)


def _and(versions: list[str]) -> str:
    return ", ".join(versions[:-1]) + (" and " if len(versions) > 1 else "") + versions[-1]


_ROOT_BEGIN = "<!-- benchfill: the versions, rewritten at each release (text outside these markers is kept) -->"
_ROOT_END = "<!-- benchfill: end of the versions -->"


def _mkdir_public(path: Path) -> None:
    """Create ``path`` (and parents) readable by others, whatever the umask. A folder that was there keeps
    its owner's write bit as it was: a releases folder its owner write-protected was opened up again."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    for p in (*missing, path):
        mode = p.stat().st_mode
        wanted = 0o755 if p in missing else 0o555
        if mode & wanted != wanted:
            try:
                p.chmod(mode | wanted)
            except PermissionError:  # someone else's folder: theirs to open up
                if p in missing:
                    raise


def _publishable(root: Path) -> None:
    """Folders 0755 and files 0644, so a shared machine or a web server can publish the release."""
    root.chmod(0o755)
    for p in root.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)


def _fields(item_id: str, fields: dict[str, Any], ancestor: dict[str, Any] | None = None) -> dict[str, Any]:
    """An item's fields for its release row. A row of an earlier release (an item of a run whose items were
    a release, or a child copied from one) drops that release's provenance columns: they are not the
    item's. A generated item's field takes its ancestor's JSON type where that is exact ("518" -> 518), so
    that a column holds one type."""
    if is_release_row(fields):
        fields = {k: v for k, v in fields.items() if k not in PROVENANCE}
    # An item's own field named like a provenance column (LiveCodeBench's "difficulty": easy, medium, hard)
    # ships as "item_<name>"; read back as items, a release gives it its name again (strip_release_columns).
    clash = sorted(k for k in set(fields) & set(PROVENANCE) if f"item_{k}" in fields)
    if clash:
        raise DataError(f"item '{item_id}': field(s) {', '.join(clash)} clash with release provenance columns, "
                        f"and item_{clash[0]} is taken too")
    fields = {(f"item_{k}" if k in PROVENANCE else k): v for k, v in fields.items()}
    if ancestor:
        fields = {k: _typed_like(v, ancestor[k]) if k in ancestor else v for k, v in fields.items()}
    return {**fields, "id": item_id}


# A field that holds the key's option index beside its letter (mmlu-pro's answer_index: "D" -> 3)
_KEY_INDEX = re.compile(r"(answer|label|gold|key|target)_?(index|idx)", re.IGNORECASE)


def _key_index(fields: dict[str, Any], ancestor: dict[str, Any] | None, answer_field: Any) -> dict[str, Any]:
    """A generated item's field that mirrors its key's option index, as its ancestor's does, set from its
    own key: a rewriter that moved the key (the options reshuffled) left the ancestor's index behind, or
    none (null in a column the card declares int64), and a harness that grades by the index could not
    score the item, or scored it against the wrong option. A key the grader reads as a letter ("(C)", the
    index 2) is written in the ancestor's form, a bare letter where the ancestor's is one."""
    from benchfill.review.queue import LETTERS

    if not ancestor or not isinstance(answer_field, str):
        return fields
    def letter(value: Any) -> str:  # "C", "(C)", " c " or the index 2, as the grader reads a key
        if isinstance(value, int) and not isinstance(value, bool):
            return LETTERS[value] if 0 <= value < len(LETTERS) else ""
        return str(value if value is not None else "").strip().strip("()").strip().upper()

    mine, theirs = (letter(d.get(answer_field)) for d in (fields, ancestor))
    if len(mine) != 1 or mine not in LETTERS or len(theirs) != 1 or theirs not in LETTERS:
        return fields
    out = dict(fields)
    if isinstance(ancestor.get(answer_field), str) and ancestor[answer_field].strip() == theirs:
        out[answer_field] = mine  # the benchmark's own form of a key ("G", not "(G)"), as a harness compares it
    for k, v in ancestor.items():
        if not _KEY_INDEX.fullmatch(k) or not isinstance(v, int) or isinstance(v, bool):
            continue
        for base in (0, 1):  # counted from 0, or from 1
            if v == LETTERS.index(theirs) + base:
                out[k] = LETTERS.index(mine) + base
                break
    return out


_INTEGER = re.compile(r"0|-?[1-9]\d*")
_DECIMAL = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")


def _typed_like(value: Any, model: Any) -> Any:
    """``value`` in the JSON type of ``model`` where the conversion loses nothing, else ``value`` as it is:
    "518" -> 518 and 518.0 -> 518 for an integer, "0.25" -> 0.25 for a number, 518 -> "518" for a string;
    lists element by element, objects key by key."""
    if value is None or model is None or isinstance(value, bool) or isinstance(model, bool):
        return value
    if isinstance(model, int):
        if isinstance(value, str) and _INTEGER.fullmatch(value):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif isinstance(model, float):
        if isinstance(value, str) and _DECIMAL.fullmatch(value) and math.isfinite(float(value)):
            return float(value)
    elif isinstance(model, str):
        if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
            return json.dumps(value)
    elif isinstance(model, list) and model and isinstance(value, list):
        return [_typed_like(v, model[0]) for v in value]
    elif isinstance(model, dict) and isinstance(value, dict):
        return {k: _typed_like(v, model[k]) if k in model else v for k, v in value.items()}
    return value


REQUIRED_FILES = (DATA_FILE, "README.md", "CHANGELOG.md")  # a release without them is not one


# What a copy of a release downloaded from the Hugging Face Hub holds beside the release's own files: the
# repository's attributes and huggingface_hub's download records (``hf download --local-dir``)
HUB_EXTRAS = (".gitattributes", ".cache", ".huggingface")


def verify_release(path: str | Path, manifest_sha256: str | None = None, *, copy: bool = False) -> list[str]:
    """Problems found by checking a release against its manifest; empty means it verifies.

    The manifest must list the data, the card and the changelog, name the folder's version and its
    parent's benchmark, and match every file. A manifest rewritten to fit edited files still matches
    them; only its own sha256, printed by ``release`` and kept in the run's store, tells. Given
    ``manifest_sha256``, that is checked too.

    ``copy``: a copy of the release away from its benchmark's release folder, as a user downloads it (into
    any folder, or the Hub's cache, whose files are links to its blobs): the folder's name and place are not
    checked, the Hub's own files (``HUB_EXTRAS``) are left out, and a link to a regular file is read as
    that file. Every file of the release must still match the manifest."""
    if not str(path).strip():  # Path("") is the current folder
        return ["release verify: an empty path"]
    path = Path(path)
    mpath = path / MANIFEST
    if not path.is_dir():  # a mistyped path was "NAME/manifest.json: missing", as if a release had lost it
        return [f"{path}: no such folder" if not path.exists() else f"{path}: not a folder (a release is one)"]
    if not mpath.is_file():
        return [f"{mpath}: missing"]
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        return [f"{mpath}: unreadable manifest ({exc.__class__.__name__})"]
    listed = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(listed, dict) or not all(isinstance(v, dict) for v in listed.values()):
        return [f"{mpath}: not a benchfill manifest (field 'files' must map each file to its sha256)"]
    problems = []
    if manifest_sha256 is not None and (own := _sha256(mpath)) != manifest_sha256.strip().lower():
        problems.append(f"{mpath}: sha256 {own} is not the one given ({manifest_sha256.strip()}): "
                        "the manifest was rewritten")
    if not copy and manifest.get("version") != path.resolve().name:
        problems.append(f"{mpath}: names version {manifest.get('version')!r}, the folder is {path.resolve().name!r}")
    if not copy and manifest.get("benchmark") != path.resolve().parent.name:
        problems.append(f"{mpath}: names benchmark {manifest.get('benchmark')!r}, the folder's parent is "
                        f"{path.resolve().parent.name!r}")
    problems += [f"{path / name}: a release must list it in its manifest" for name in REQUIRED_FILES
                 if name not in listed]
    files, odd = _regular_files(path, copy=copy)
    problems += odd
    actual = {name: {"sha256": _sha256(p)} for name, p in files.items() if p.name != MANIFEST}
    for name, info in sorted(listed.items()):
        if name not in actual:
            problems.append(f"{path / name}: listed in the manifest but missing")
        elif actual[name]["sha256"] != info.get("sha256"):
            problems.append(f"{path / name}: sha256 differs from the manifest (modified)")
    problems += [f"{path / n}: not in the manifest (added)" for n in sorted(set(actual) - set(listed))]
    if "README.md" in files and DATA_FILE in files:
        problems += _card_against_data(files["README.md"], files[DATA_FILE])
    # beside it where the release still sits in its benchmark's folder (one copied out alone has none)
    kept, scale = manifest.get("scale_of_record_sha256"), path.parent / ScaleOfRecord.FILE
    if kept and not copy and scale.is_file() and _sha256(scale) != kept:
        problems.append(f"{scale}: sha256 differs from the one release {path.name} was placed on (modified)")
    return problems


def _regular_files(root: Path, copy: bool = False) -> tuple[dict[str, Path], list[str]]:
    """A release's regular files by relative name, and a problem for everything else in it: a symbolic link
    (its target, perhaps outside the release, would be what the manifest vouches for), a pipe or a device.
    In a downloaded ``copy`` a link to a regular file counts as that file (the Hub's cache links every file to
    its blob), and the Hub's own files are left out."""
    files, problems = {}, []
    for folder, dirs, names in os.walk(root):
        if copy and Path(folder) == root:
            dirs[:] = [d for d in dirs if d not in HUB_EXTRAS]
            names = [n for n in names if n not in HUB_EXTRAS]
        for name in sorted(dirs + names):
            p = Path(folder) / name
            rel = p.relative_to(root).as_posix()
            if copy and name in names and p.is_symlink() and p.is_file():
                files[rel] = p  # the content is what the manifest checks, wherever the link points
            elif p.is_symlink():
                problems.append(f"{root / rel}: a symbolic link; a release holds regular files only")
            elif name in names:
                if p.is_file():
                    files[rel] = p
                else:
                    problems.append(f"{root / rel}: not a regular file; a release holds regular files only")
        dirs[:] = [d for d in dirs if not (Path(folder) / d).is_symlink()]
    return files, problems


def _card_against_data(card: Path, data: Path) -> list[str]:
    """The card's ``data_sha256`` (its front matter) against the data: a manifest rewritten to fit edited
    data still lists the card, which then names other data than the release holds. A card without the
    field is left to the manifest (and to ``--sha256``, which pins the manifest itself)."""
    want = _card_meta(card).get("data_sha256")
    if not isinstance(want, str):  # a card from before the field (releases of 2026-11-29 and earlier)
        return []
    if _sha256(data) != want:
        return [f"{data}: sha256 differs from the card's data_sha256 ({card.name}): the data is not the card's"]
    return []


def _front_matter(card: Path) -> tuple[dict[str, Any], str]:
    """A card's front matter (``{}`` where it has none, or none that parses to a mapping) and the text after it;
    ``({}, "")`` where the file is missing or unreadable."""
    import yaml

    try:
        text = card.read_text(encoding="utf-8").removeprefix("\ufeff")  # (an editor's byte-order mark)
    except (OSError, UnicodeDecodeError):
        return {}, ""
    if text.startswith("---\n---\n"):  # an empty front matter
        return {}, text[8:]
    front, sep, rest = text.removeprefix("---\n").partition("\n---\n")
    if not text.startswith("---\n") or not sep:
        return {}, text
    try:
        head = yaml.safe_load(front)
    except yaml.YAMLError:
        return {}, text
    if head is None:
        return {}, rest
    return (head, rest) if isinstance(head, dict) else ({}, text)


def _check_root_readme(bench_dir: Path) -> None:
    """Refuse, before anything is written, a CHANGELOG.md in the benchmark's folder that benchfill did not
    write (each release replaces it), and a README.md there that the release could not
    keep whole while it writes its versions there (``root_card``): not UTF-8 text (it was taken for no file and
    overwritten), benchfill's markers not one pair in order (the maintainer's text after a lone marker was
    dropped, or the versions listed twice), or a front matter that is not a YAML mapping (kept as text, a
    second front matter under benchfill's)."""
    import yaml

    log = bench_dir / "CHANGELOG.md"
    try:  # the benchmark's changelog is each release's, replaced whole: a maintainer's own was lost
        head = log.read_bytes()[:200].decode("utf-8", "replace").removeprefix("\ufeff")
    except FileNotFoundError:
        head = None
    except OSError as exc:
        named(exc, log)
        raise
    if head is not None and not head.startswith("# Changelog of "):
        raise BenchfillError(f"{log}: not a changelog benchfill wrote; each release replaces it with every "
                             "version's changes: move yours away (or into README.md, which releases keep)")
    path = bench_dir / "README.md"
    try:
        text = path.read_text(encoding="utf-8").removeprefix("\ufeff")
    except FileNotFoundError:
        return
    except UnicodeDecodeError:
        raise BenchfillError(f"{path}: not UTF-8 text; each release keeps your text in it and lists its versions "
                             "there: save it as UTF-8, or move it away") from None
    except OSError as exc:
        named(exc, path)
        raise
    begin, end = text.count(_ROOT_BEGIN), text.count(_ROOT_END)
    if (begin, end) not in ((0, 0), (1, 1)) or (begin and text.index(_ROOT_BEGIN) > text.index(_ROOT_END)):
        raise BenchfillError(f"{path}: benchfill's two markers around its list of versions ({begin} begin, {end} "
                             "end) are not one pair in order: put them back around the list, or remove both")
    if text.startswith("---\n") and not text.startswith("---\n---\n"):
        front, sep, _ = text.removeprefix("---\n").partition("\n---\n")
        if sep:
            try:
                head = yaml.safe_load(front)
            except yaml.YAMLError as exc:
                why = " ".join(str(exc).split())
                raise BenchfillError(f"{path}: its front matter is not YAML ({why}); fix it, or remove it") from None
            if head is not None and not isinstance(head, dict):
                raise BenchfillError(f"{path}: its front matter is a YAML {type(head).__name__}, not a mapping of "
                                     "keys; fix it, or remove it")


def _card_meta(card: Path) -> dict[str, Any]:
    """The ``benchfill`` block of a card's front matter (the release's meta); {} where it has none."""
    meta = _front_matter(card)[0].get("benchfill")
    return meta if isinstance(meta, dict) else {}


def manifest_sha256(release_dir: str | Path) -> str:
    """The sha256 of a release's manifest: the one figure that pins every file of it."""
    return _sha256(Path(release_dir) / MANIFEST)


def recorded_sha256(release_dir: str | Path, run_dir: str | Path) -> str | None:
    """The manifest sha256 the run's store recorded for the release at ``release_dir`` (None if none)."""
    from benchfill.store import open_run_store

    store = open_run_store(Path(run_dir), create=False)
    try:
        row = _recorded(store.all(Release), Path(release_dir), run_name(store, run_dir))
    finally:
        store.close()
    return None if row is None else row.manifest_sha256


def diff_releases(a: str | Path, b: str | Path) -> ReleaseDiff:
    """Items added, removed and changed (by item fields, not provenance) from release ``a`` to ``b``, and those in
    both placed otherwise (their difficulty or z)."""
    names = [_manifest(Path(p)).get("benchmark") for p in (a, b)]
    if all(names) and names[0] != names[1]:
        raise ConfigError(f"{a} is a release of {names[0]!r} and {b} one of {names[1]!r} (their {MANIFEST}): "
                          "diff compares releases of one benchmark")
    ra, rb = _load_rows(Path(a)), _load_rows(Path(b))
    for p in (Path(a), Path(b)):
        _warn_unverified(p)
    d = ReleaseDiff(a=_version_of(Path(a)), b=_version_of(Path(b)))
    d.added = [i for i in rb if i not in ra]
    d.removed = [i for i in ra if i not in rb]
    for i in ra.keys() & rb.keys():
        fa = {k: v for k, v in ra[i].items() if k not in PROVENANCE}
        fb = {k: v for k, v in rb[i].items() if k not in PROVENANCE}
        changed = sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
        if changed:
            d.changed[i] = changed
        if any(ra[i].get(k) != rb[i].get(k) for k in ("difficulty", "z")):
            d.placed_otherwise.append(i)
    d.changed = dict(sorted(d.changed.items()))
    d.placed_otherwise.sort()
    return d


def _warn_unverified(path: Path) -> None:
    """A warning where a release no longer matches its own manifest: its diff reads its files as they are, and
    a row edited after the release had diffed as one more "changed" item, with no word that it fails verify.
    A copy away from its benchmark's folder (renamed, downloaded) is checked as ``verify --copy`` checks it."""
    m = _manifest(path)
    here = path.resolve()
    copy = m.get("version") != here.name or m.get("benchmark") != here.parent.name
    problems = verify_release(path, copy=copy)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        log.warning("%s does not match its manifest: %s%s; `benchfill release verify %s%s` lists what differs",
                    path, problems[0], more, path, " --copy" if copy else "")


def _load_rows(path: Path) -> dict[str, dict]:
    data = path / DATA_FILE
    if not data.is_file():
        raise DataError(f"{path}: not a benchfill release (no {DATA_FILE})")
    rows, first = {}, {}
    with data.open("rb") as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise DataError(f"{data} line {n}: not UTF-8 text") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                raise DataError(f"{data} line {n}: not valid JSON") from None
            if not isinstance(row, dict) or row.get("id") is None:
                raise DataError(f"{data} line {n}: not an item (a JSON object with an 'id' was expected)")
            item_id = str(row["id"])
            if item_id in first:
                raise DataError(f"{data} line {n}: item '{item_id}' again (first on line {first[item_id]})")
            first[item_id] = n
            rows[item_id] = row
    return rows


def _rule_changed(board: ReviewBoard, outcomes: dict, prev_dir: Path | None, prev_version: str,
                  prev_rows: dict[str, dict], name: str) -> str:
    """A changelog line naming the items the decisions the previous release was made from now pass otherwise,
    where that release was made under an earlier reading of them (``RULE_VERSION``): an upgrade that moves an
    item in or out, or ships another version of it, with no decision made since, is said, not left to look
    like a reviewer's doing. Only this run's items that release was made from count (another run's release
    read none of this run's decisions), and only those with no decision since it."""
    from benchfill.review.rule import outcome, outcome_before_2

    if prev_dir is None or _manifest(prev_dir).get("review_rule_version", 1) >= RULE_VERSION:
        return ""
    if not any(r.get("run_id") == name and r.get("released_in") == prev_version for r in prev_rows.values()):
        return ""  # (made by another run: it read none of these decisions)
    since = parse_time(_released_at(prev_dir))
    otherwise = []
    for item_id, o in outcomes.items():
        if since is None or any(as_utc(d.created_at) > since for d in o.decisions):
            continue  # decided again since: the changelog's other lines say what that did
        new = outcome(item_id, o.decisions, board.rule)
        status, edit = outcome_before_2(item_id, o.decisions, board.rule)
        old_edit = json.loads(edit) if edit else None
        if (new.status, new.edited_fields) != (status, old_edit):
            otherwise.append(f"{untrusted.md_code(item_id)} ({status} -> {new.status}"
                             + (", another edit in force" if new.edited_fields != old_edit else "") + ")")
    if not otherwise:
        return ""
    return (f"- read as this benchfill reads review decisions, {len(otherwise)} item(s) stand otherwise on the "
            f"decisions {prev_version} was made from: {', '.join(otherwise)} (an accept now counts for the version "
            "it was given on, an editor's own accept keeps the edit, and reviewer names are compared without "
            "regard to case; README, review)\n")


def _manifest(path: Path) -> dict[str, Any]:
    """A release's manifest; {} where it has none. One it has but that cannot be read is the user's to fix."""
    mpath = path / MANIFEST
    if not mpath.is_file():
        return {}
    try:
        manifest = json.loads(_read_text(mpath))
    except (json.JSONDecodeError, RecursionError):
        raise DataError(f"{mpath}: not valid JSON") from None
    if not isinstance(manifest, dict):
        raise DataError(f"{mpath}: not a benchfill manifest (a JSON object was expected)")
    return manifest


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None


def _version_of(path: Path) -> str:
    return str(_manifest(path).get("version") or path.name)


def _versions(bench_dir: Path) -> list[str]:
    if not bench_dir.is_dir():
        return []
    # a folder named like a version without a manifest is not a release (someone's mkdir): not counted
    found = [p.name for p in bench_dir.iterdir() if p.is_dir() and SEMVER.match(p.name) and (p / MANIFEST).is_file()]
    return sorted(found, key=semver_key)


def _hashes(root: Path) -> dict[str, dict[str, Any]]:
    return {
        p.relative_to(root).as_posix(): {"sha256": _sha256(p), "bytes": p.stat().st_size}
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _safe_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ConfigError(f"benchmark name {name!r} cannot name a release directory")
    return name


# ``benchfill.release(...)`` calls release(): the package attribute is this module (see benchfill.calling_module).
sys.modules[__name__].__class__ = calling_module(release)
