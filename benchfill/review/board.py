"""A run's review board: its queue, its store, and the decisions reviewers make.

The page, the CSV import and a maintainer's own tooling all record decisions
through ``ReviewBoard.decide``, so every path validates the same way and every
decision reaches the store at once.
"""

from __future__ import annotations

import json
import math
import os
import unicodedata
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from benchfill import untrusted
from benchfill.data import options_of
from benchfill.errors import BenchfillError, ConfigError, DataError
from benchfill.review.queue import LETTERS, QueueEntry, load_queue
from benchfill.review.rule import Outcome, ReleaseRule, outcome, reviewer_key
from benchfill.schema import ReviewDecision, as_utc, now
from benchfill.store import open_run_store

# "withdraw" takes back the reviewer's own standing decision on the item (a mistaken accept, a decision made
# under a misspelt name): they then count neither for nor against it.
DECISIONS = ("accept", "reject", "edit", "withdraw")
MAX_REVIEWER = 80


class Changed(BenchfillError):
    """A decision on an item that was edited since the reviewer opened it."""


TICK = timedelta(microseconds=1)
# Run meta holding the latest moment a release or an export took (``hold_moment``): a release's own store row
# is written only once its files are built, and an export's moment went only into its sheet, so a decision
# made meanwhile under a clock behind them was stamped before them.
CLOCK_KEY = "review_clock"


def moment_after(store, *also: datetime | None) -> datetime:
    """Now, but later than every decision, release and export the store holds (any run's) and than ``also``.

    Which came first, a decision or a release (or a removal, or a sheet's export), is read off their times;
    each is stamped by the clock of whatever machine made it. A clock stepped back (NTP, a restored
    snapshot) or two hosts with skewed clocks on one store had a reject made after a release counted as made
    before it (the next release shipped the rejected item), a reviewer's later decision lose to an earlier
    one, and a stale sheet undo a later decision. A moment taken here keeps the order in which they were
    recorded, whatever the clocks say."""
    floors = [t + TICK for t in (*recorded_moments(store), *(as_utc(a) for a in also if isinstance(a, datetime)))]
    return max([now(), *floors])


def recorded_moments(store) -> list[datetime]:
    """The latest decision, release and held moment (``hold_moment``) the store records, of any run."""
    from sqlalchemy import func

    from benchfill.schema import Release, RunMeta

    with store.session() as s:  # (plain selects: every run's rows, not this handle's only)
        latest = [s.exec(select(func.max(t.created_at))).first() for t in (ReviewDecision, Release)]
        held = list(s.exec(select(RunMeta.value_json).where(RunMeta.key == CLOCK_KEY)))
    for value in held:
        try:
            latest.append(datetime.fromisoformat(json.loads(value)))
        except (ValueError, TypeError):
            pass
    return [as_utc(t) for t in latest if isinstance(t, datetime)]


def hold_moment(store, moment: datetime) -> None:
    """Record ``moment`` (a release's or an export's, taken by ``moment_after``, so later than every moment the
    store records) so that every decision made after it is stamped later."""
    store.set_meta(CLOCK_KEY, moment.isoformat())


def _exported(source: str) -> datetime | None:
    """The export time a sheet's decision names in its ``source`` ("sheet:<time>"), where it does."""
    if not source.startswith("sheet:"):
        return None
    try:
        return datetime.fromisoformat(source.removeprefix("sheet:"))
    except ValueError:
        return None


def same_decision(prev: ReviewDecision, new: ReviewDecision) -> bool:
    """The same decision, reason and edit (its fields as JSON values, not as spelt)."""
    if (prev.decision, prev.reason) != (new.decision, new.reason):
        return False
    load = lambda s: None if s is None else json.loads(s)  # noqa: E731
    return load(prev.edited_json) == load(new.edited_json)


class ReviewBoard:
    """Open with ``ReviewBoard(run_dir)``; close (or use as a context manager) when done.

    ``writable``: refuse at once a store that cannot be written (a command that will record decisions);
    otherwise a read-only store opens for reading, and a decision on it is refused when it is made."""

    def __init__(self, run_dir: str | Path, rule: ReleaseRule | None = None, *, writable: bool = False):
        if not isinstance(run_dir, (str, os.PathLike)):  # a library caller's slip: said, not a TypeError
            raise ConfigError(f"run_dir: expected a run folder's path, got {type(run_dir).__name__} {run_dir!r}")
        self.run_dir = Path(run_dir)
        self._manifests: tuple[tuple, Any] | None = None  # (what the release folder held, its latest removals)
        if not self.run_dir.is_dir():
            raise ConfigError(f"{self.run_dir}: no such run directory")
        self._store = open_run_store(self.run_dir, create=False, writable=writable)
        self._closed = False
        try:  # whatever fails here (a queue, a kept rule or a spec that cannot be read) leaves no store open
            self.entries: list[QueueEntry] = load_queue(self.run_dir, self._store)
            self._by_id = {e.item_id: e for e in self.entries}
            # The rule the review page was served under, kept with the run, so that a release without a rule of
            # its own ships what the page showed as accepted (not the default's view of the same decisions).
            stored = self.store.get_meta("release_rule")
            try:
                self.kept_rule = ReleaseRule(**stored) if isinstance(stored, dict) else None
            except (TypeError, ValueError, BenchfillError) as exc:  # an unknown field, a value of the wrong type
                raise ConfigError(f"{self.run_dir}: the release rule kept with the run cannot be read "
                                  f"({str(exc).splitlines()[0][:120]}); the store was edited by hand?") from None
            self.rule = rule or self.kept_rule or ReleaseRule()
            spec = self.store.get_meta("benchmark")
            self.spec: dict[str, Any] = spec if isinstance(spec, dict) else {}  # the run's BenchmarkSpec, as recorded
        except BaseException:
            self.close()
            raise

    def code_fields(self) -> tuple[str, str] | None:
        """(tests field, entry point field) of a code benchmark's items; None for other benchmarks."""
        if self.spec.get("evaluator") != "code":
            return None
        return self.spec.get("tests_field") or "test", self.spec.get("entry_point_field") or "entry_point"

    @property
    def store(self):
        """The run's store. A closed board refuses: its store's engine, disposed, had quietly opened new
        connections, and a decision made through a board its owner had closed was recorded all the same."""
        self._check_open()
        return self._store

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError(f"review board of {self.run_dir} is closed; open a new ReviewBoard")

    def __enter__(self) -> ReviewBoard:
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the store; a second close does nothing, and any other use after it is refused."""
        if not self._closed:
            self._closed = True
            self._store.close()

    @property
    def benchmark(self) -> str:
        spec = self.store.get_meta("benchmark") or {}
        name = spec.get("name") if isinstance(spec, dict) else spec
        if not name and self.entries:
            name = self.entries[0].record.get("benchmark")
        return str(name or self.run_dir.name)

    def keep_rule(self) -> None:
        """Keep this board's rule with the run: later boards opened without a rule use it."""
        self.store.set_meta("release_rule", self.rule.to_dict())
        self.kept_rule = self.rule

    def standing(self, item_id: str, outcome: Outcome | None = None) -> dict[str, Any]:
        """The item as a release would ship it now: the edit in force, else the proposal (``outcome``: the
        item's, where the caller has it already; else its decisions are read)."""
        outcome = outcome or self.outcome_of(item_id)
        return outcome.edited_fields or self.entry(item_id).child

    def version(self, item_id: str, outcome: Outcome | None = None) -> str:
        """A short digest of ``standing``: what a reviewer saw, to be checked when they decide."""
        import hashlib

        text = json.dumps(self.standing(item_id, outcome), sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def entry(self, item_id: str) -> QueueEntry:
        self._check_open()
        try:
            return self._by_id[item_id]
        except KeyError:
            raise DataError(f"item_id '{item_id}' is not in the review queue of {self.run_dir}") from None

    def decide(
        self,
        item_id: str,
        reviewer: str,
        decision: str,
        reason: str = "",
        text: str | None = None,
        answer: str | int | float | None = None,  # a number keeps its JSON type
        source: str = "",
        seen: str | None = None,
        options: str | None = None,
    ) -> ReviewDecision:
        """Record one reviewer's decision; for "edit", ``text`` and/or ``answer`` replace those of the item as
        it stands (the edit in force, else the proposal). ``source``: where it was made ("page",
        "sheet:<export time>"; ReviewDecision.source). ``seen``: the ``version`` of the item the reviewer
        decided on (the page sends it): an item edited since by someone else is refused (``Changed``), not
        accepted or edited unseen."""
        self._check_open()  # before any other check: a closed board's is the error to name
        # Checked by type here, at the library's door: a number would fail in prepare's .strip() as an
        # AttributeError. None stays allowed where prepare reads it as empty and says which field is.
        # ``answer`` may be a number (an edited numeric answer keeps its JSON type).
        for name, value in (("item_id", item_id), ("reviewer", reviewer), ("decision", decision),
                            ("reason", reason), ("text", text), ("source", source), ("options", options),
                            ("answer", answer)):
            if value is not None and not isinstance(value, str) and name != "answer":
                raise ConfigError(f"{name}: expected a string, got {type(value).__name__} {value!r}")
            # a list, a dict or True as the answer was recorded, and a release shipped it
            if name == "answer" and not (value is None or isinstance(value, str) or (
                    isinstance(value, int) and not isinstance(value, bool))
                    or (isinstance(value, float) and math.isfinite(value))):  # (an int of 400 digits: no float)
                raise ConfigError(f"answer: expected a string or a finite number, got {type(value).__name__} "
                                  f"{repr(value)[:80]}")
            # a JSON "\ud800" escape decodes to a string the store cannot write: refused here, not a 500
            if isinstance(value, str) and not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ConfigError(f"{name}: holds an unpaired surrogate ({value[exc.start]!a}), not text") from None
        kind = (decision or "").strip().lower()
        checked = seen is not None and kind != "withdraw"
        # The check and the write under the run folder's lock and the store's turns, as a sheet's import takes
        # them: two page servers (or a page and a script) on one run each read the item unchanged, then both
        # wrote an edit on it; from two folders of one store, the folder's lock alone did not see the other
        from benchfill import locks

        held = locks.hold(self.run_dir)
        try:
            with self.store.turns("review"):
                return self._decide_held(item_id, reviewer, decision, reason, text, answer, source, seen, options,
                                         kind, checked)
        finally:
            locks.release(held)

    def _decide_held(self, item_id: str, reviewer: str, decision: str, reason: str, text: str | None,
                     answer: str | int | float | None, source: str, seen: str | None, options: str | None,
                     kind: str, checked: bool) -> ReviewDecision:
        now = None
        if checked or kind == "edit":
            self.entry(item_id)  # an unknown id is named as such first
            now = self.outcome_of(item_id)  # read once, for the check and for the edit's base
        if checked and seen != self.version(item_id, now):
            by = now.edited_by
            raise Changed(f"decision on '{item_id}': the item changed since you opened it ("
                          + (f"the edit by {by} is now the one in force" if by else "the edit you saw was withdrawn")
                          + "); reload it to see it as it stands. Nothing was recorded")  # fmt: skip
        row = self.prepare(item_id, reviewer, decision, reason, text, answer, source, outcome=now,
                           options=options)
        repeated = self._repeats(item_id, row)
        if repeated is not None:  # posted again (a retry, a second tab): recorded once, as a sheet imported
            return repeated       # twice is (ten posts of one accept had made ten rows, each in the release)
        self.record([row])
        return row

    def _repeats(self, item_id: str, row: ReviewDecision) -> ReviewDecision | None:
        """The reviewer's latest decision on the item, where ``row`` says the same of the same version of it:
        no edit made or withdrawn since, by anyone, in any run whose decisions it counts (``_elsewhere``)."""
        on = sorted(self.decisions(item_id) + self._elsewhere([self.entry(item_id)]),
                    key=lambda d: (as_utc(d.created_at), d.id or 0))
        mine = [k for k, d in enumerate(on) if reviewer_key(d.reviewer) == reviewer_key(row.reviewer)]
        if not mine:
            return None
        last = on[mine[-1]]
        if not same_decision(last, row) or any(d.decision in ("edit", "withdraw") for d in on[mine[-1] + 1:]):
            return None
        return last if self.unchanged_since(item_id, last, on) else None

    def unchanged_since(self, item_id: str, last: ReviewDecision, on: list[ReviewDecision] | None = None,
                        exported: datetime | None = None) -> bool:
        """Did the item stand, when the new decision was made on it, as it did when ``last`` was made, so that
        the same decision again records nothing? Not where the edit in force changed between the two (an
        accept given on an edit its author has since rejected no longer counts, and must be given again), nor
        where a release removed it between them (an accept brings it back). The new decision was made now on
        the page, or at ``exported`` on a sheet (a sheet exported before the change never showed it: its row
        is the decision made before). ``on``: the item's decisions, where the caller has them."""
        if on is None:
            on = sorted(self.decisions(item_id) + self._elsewhere([self.entry(item_id)]),
                        key=lambda d: (as_utc(d.created_at), d.id or 0))
        then = (as_utc(last.created_at), last.id or 0)
        upto = [d for d in on if (as_utc(d.created_at), d.id or 0) <= then]
        seen = on if exported is None else [d for d in on if as_utc(d.created_at) <= exported or
                                            (as_utc(d.created_at), d.id or 0) <= then]  # fmt: skip
        if outcome(item_id, upto, self.rule).edited_fields != outcome(item_id, seen, self.rule).edited_fields:
            return False
        if last.decision not in ("accept", "edit"):  # (a reject or a withdraw again puts nothing back)
            return True
        gone = self.removed_at(item_id, on)
        return gone is None or gone <= then[0] or (exported is not None and exported < gone)

    def prepare(
        self,
        item_id: str,
        reviewer: str,
        decision: str,
        reason: str = "",
        text: str | None = None,
        answer: str | int | float | None = None,
        source: str = "",
        outcome: Outcome | None = None,
        options: str | None = None,
    ) -> ReviewDecision:
        """A checked, not yet stored decision (so a batch can be checked whole before any write).
        ``outcome``: the item's standing, where the caller read it already (a sheet reads all once).
        ``options``: an edit's options of a multiple-choice item, one a line (a leading "A. " is dropped)."""
        entry = self.entry(item_id)
        reviewer = (reviewer or "").strip()
        reason = (reason or "").strip()
        decision = (decision or "").strip().lower()
        if not reviewer:
            raise BenchfillError(f"decision on '{item_id}': field 'reviewer' is empty (who made it?)")
        # (an escape in a name went raw into the store, the release rows and every page that shows it)
        if len(reviewer) > MAX_REVIEWER or untrusted.controls_in(reviewer):
            raise BenchfillError(f"decision on '{item_id}': field 'reviewer' must be one short line of text "
                                 "(no control characters)")
        if decision not in DECISIONS:
            raise BenchfillError(
                f"decision on '{item_id}': field 'decision' must be one of {', '.join(DECISIONS)}, got {decision!r}"
            )
        if decision == "withdraw":
            mine = [d for d in self.decisions(item_id) if reviewer_key(d.reviewer) == reviewer_key(reviewer)]
            if not mine or mine[-1].decision == "withdraw":
                raise BenchfillError(f"decision on '{item_id}': {reviewer} has no decision on it to withdraw")
        # As a reviewer's name is, and a release's removal reason (release_carry.check_remove): an escape in it
        # went raw into the store and the release rows. A sheet's cell may hold line breaks and tabs: kept.
        if untrusted.controls_in(reason.replace("\t", " ").replace("\r", " ").replace("\n", " ")):
            raise BenchfillError(f"decision on '{item_id}': field 'reason' holds a control character "
                                 f"({untrusted.terminal(reason)[:120]})")
        if decision == "reject" and _blank(reason):
            raise BenchfillError(f"decision on '{item_id}': field 'reason' is required to reject")
        edited_json = None
        if decision == "edit":
            # on the item as it stands: a change of the answer alone keeps an earlier edit's text
            # (the edit in force, restated: a sheet imported again repeats its reviewer's own, which import skips)
            outcome = outcome or self.outcome_of(item_id)
            base = self.standing(item_id, outcome)
            edited = self._edited(entry, text, answer, base, options, exact=self.code_fields() is not None)
            # no change to the item as it stands, but a reviewer's own edit in force restated (a sheet imported
            # again), which is recorded once: an edit back to the proposal, over a colleague's, is a change
            own = outcome.edited_by is not None and reviewer_key(outcome.edited_by) == reviewer_key(reviewer)
            if edited == base and not own:
                raise BenchfillError(f"decision on '{item_id}': the edit changes neither text, answer nor options of "
                                     "the item as it stands" + (" (accept it to agree with it)" if outcome.edited_by else ""))
            self._check_code(entry, edited)
            edited_json = json.dumps(edited, ensure_ascii=False)
        return ReviewDecision(
            run_id=self.store.run_id, item_id=item_id, reviewer=reviewer, decision=decision, reason=reason,
            edited_json=edited_json, source=source,
        )

    def record(self, rows: list[ReviewDecision]) -> None:
        """Store prepared decisions in one transaction: all of them or none. Each is stamped after every
        decision and release the store holds (``moment_after``), and one from a sheet after its export."""
        exported = [_exported(r.source) for r in rows]
        at = moment_after(self.store, *exported)
        with self.store.session() as s:
            for row in rows:
                row.created_at = at
                at += TICK
                s.add(row)

    @staticmethod
    def _edited(entry: QueueEntry, text: str | None, answer: str | int | float | None, base: dict[str, Any],
                options: str | None = None, exact: bool = False) -> dict[str, Any]:  # fmt: skip
        if text is None and answer is None and options is None:
            raise BenchfillError(f"decision on '{entry.item_id}': an edit needs a new text, answer or options")
        # A spreadsheet saves a cell's line breaks as CRLF: line endings alone are no edit (they shipped as one,
        # and the item left the after-figures as edited)
        text, answer, options = (v.replace("\r\n", "\n").replace("\r", "\n") if isinstance(v, str) else v
                                 for v in (text, answer, options))  # fmt: skip (an answer may be a number)
        if isinstance(answer, str) and entry.options_field is not None:
            answer = answer.strip()  # a multiple-choice key: "J\n" (Enter in the answer box) is "J"
        edited = dict(base)
        # Nor are trailing spaces or another Unicode normal form of the same characters (a spreadsheet's or an
        # editor's doing): the value as it stands is kept, so that no invisible change ships as an edit. Not for
        # code (``exact``): its text and solution are joined into the program, where a stray indent is an error
        if not exact and isinstance(text, str) and _same_text(text, base.get(entry.text_field)):
            text = base[entry.text_field]
        if not exact and isinstance(answer, str) and _same_text(answer, base.get(entry.answer_field)):
            answer = base[entry.answer_field]
        if text is not None:
            if _blank(text):
                raise BenchfillError(f"decision on '{entry.item_id}': edited text is empty")
            edited[entry.text_field] = text
        if answer is not None:
            if _blank(str(answer)):
                raise BenchfillError(f"decision on '{entry.item_id}': edited answer is empty")
            # Keep the answer's JSON type when it was a number, so graders see what they expect.
            old = entry.child.get(entry.answer_field)
            edited[entry.answer_field] = _like(old, answer)
        if options is not None:
            edited[_options_field(entry)] = _options_like(entry, base, options)
        _check_key(entry, base, edited, answer is not None)
        return edited

    def _check_code(self, entry: QueueEntry, edited: dict[str, Any]) -> None:
        """A code item as edited: its reference solution, as it will ship (raw, not read out of prose as a
        model's reply is), run against the item's own tests, confined as a run grades, or unconfined where
        the run itself was allowed to (a failing or unparsable one had shipped as accepted). Not run without
        confinement or without tests: the page and the sheet show the tests beside it (README)."""
        fields = self.code_fields()
        if fields is None or edited.get(fields[0]) is None:
            return
        from benchfill.benchmarks import BenchmarkSpec
        from benchfill.evaluators.code_tests import CodeTests
        from benchfill.evaluators.sandbox import Unconfined

        grader = CodeTests(allow_unconfined=self.store.get_meta("isolation") == "unconfined")
        try:
            fault = grader.reference_fault({**edited, entry.answer_field: str(edited.get(entry.answer_field, ""))},
                                           BenchmarkSpec(**self.spec))
        except Unconfined:
            return
        except (BenchfillError, ValueError, TypeError):
            return  # a spec or item the grader cannot read: the run's own grading said so already
        if fault:
            raise BenchfillError(f"decision on '{entry.item_id}': as edited, the item's reference solution fails "
                                 f"{fault.removeprefix('its reference solution fails ')}; fix it, or reject the item")


    def decisions(self, item_id: str | None = None) -> list[ReviewDecision]:
        with self.store.session() as s:
            q = self.store.select(ReviewDecision)
            if item_id is not None:
                q = q.where(ReviewDecision.item_id == item_id)
            return sorted(s.exec(q), key=lambda d: (d.created_at, d.id or 0))

    def outcomes(self, rule: ReleaseRule | None = None) -> dict[str, Outcome]:
        """Each queued item's standing under ``rule`` (the board's rule by default), in queue order."""
        rule = rule or self.rule
        on = self.decisions_by_item()
        # each item given its own decisions: given all of them, each looked through every one (a page of a
        # 3,000-item queue with a decision on each took 5 s, an item page 10 s)
        return {e.item_id: outcome(e.item_id, on.get(e.item_id, []), rule) for e in self.entries}

    def removed(self, outcomes: dict[str, Outcome] | None = None, only: str | None = None) -> dict[str, str]:
        """This run's items that the benchmark's latest release keeps out (``release --remove``, its manifest's
        ``removed``) with no accept or edit since, each with a line saying so: the rule alone still calls
        such an item accepted, which the page and the sheet had shown as "to be released". ``outcomes``:
        the queue's, where the caller has them; ``only``: one item's."""
        out = {}
        for item_id, (line, since) in self._removal_record().items():
            if only is not None and item_id != only:
                continue
            o = outcomes[item_id] if outcomes is not None and item_id in outcomes else self.outcome_of(item_id)
            if self._removal_in_force(since, o.decisions):
                out[item_id] = line
        return out

    @staticmethod
    def _removal_in_force(since: datetime, decisions: list[ReviewDecision]) -> bool:
        """No accept or edit after the removal (either puts the item back, as the next release reads it)."""
        return not any(d.decision in ("accept", "edit") and as_utc(d.created_at) > since for d in decisions)

    def removed_at(self, item_id: str, decisions: list[ReviewDecision] | None = None) -> datetime | None:
        """When the benchmark's latest release removed this run's item, where that removal is in force."""
        gone = self._removal_record().get(item_id)
        if gone is None:
            return None
        on = decisions if decisions is not None else self.decisions(item_id) + self._elsewhere([self.entry(item_id)])
        return gone[1] if self._removal_in_force(gone[1], on) else None

    def _removal_record(self) -> dict[str, tuple[str, datetime]]:
        """This run's items the benchmark's latest published release records as removed, each with a line
        and the moment (the decisions since not consulted). That release is the newest published one (a
        folder named as the version its manifest gives: a release's staging folder is not one) in the folder
        of this run's latest release, or, where that folder is gone (the project moved), in ``releases/``
        beside the run, where the next release looks; another run's release into the folder may have removed
        this run's item. Read again only when a manifest there changed."""
        from benchfill.release_carry import _made_as, parse_time
        from benchfill.schema import Release
        from benchfill.store import run_name

        with self.store.session() as s:
            rows = sorted(s.exec(self.store.select(Release)), key=lambda r: as_utc(r.created_at))
        if not rows:
            return {}
        beside = self.run_dir.resolve().parent / "releases" / self.benchmark
        key: tuple = ()
        for bench_dir in dict.fromkeys((Path(rows[-1].path).parent, beside)):
            try:
                key = tuple((f.name, (f / "manifest.json").stat().st_mtime_ns) for f in sorted(bench_dir.iterdir())
                            if not f.name.startswith(".") and (f / "manifest.json").is_file())
            except OSError:
                continue
            if key:
                break
        if not key:
            return {}
        if self._manifests is None or self._manifests[0] != (bench_dir, key):
            newest: tuple[datetime, dict[str, Any]] | None = None
            for folder, _ in key:
                try:
                    manifest = json.loads((bench_dir / folder / "manifest.json").read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
                if not isinstance(manifest, dict) or manifest.get("benchmark") != self.benchmark \
                        or manifest.get("version") != folder:
                    continue
                at = parse_time(manifest.get("released_at_us") or manifest.get("released_at"))
                if at is not None and (newest is None or at > newest[0]):
                    newest = (at, manifest)
            record = newest[1].get("removed") if newest else None
            out: dict[str, tuple[str, datetime]] = {}
            name = run_name(self.store, self.run_dir)  # the run's name in its releases' rows
            for item_id, e in (record.items() if isinstance(record, dict) else ()):
                if not isinstance(e, dict):
                    continue
                base, run = _made_as(str(item_id), e.get("run_id"))
                since = parse_time(e.get("removed_at"))
                if run == name and base in self._by_id and since is not None:
                    out[base] = (f"removed from release {e.get('removed_in')} ({e.get('why')}); it stays out of "
                                 "later releases until someone accepts or edits it again", since)
            self._manifests = ((bench_dir, key), out)
        return self._manifests[1]

    def outcome_of(self, item_id: str, rule: ReleaseRule | None = None) -> Outcome:
        """One queued item's standing under ``rule``, reading only the decisions on it."""
        entry = self.entry(item_id)
        return outcome(item_id, self.decisions(item_id) + self._elsewhere([entry]), rule or self.rule)

    def decisions_by_item(self) -> dict[str, list[ReviewDecision]]:
        """Every decision on each queued item, this run's and other runs' (``_elsewhere``), read once."""
        on: dict[str, list[ReviewDecision]] = {}
        for d in self.decisions() + self._elsewhere():
            on.setdefault(d.item_id, []).append(d)
        return on

    def _elsewhere(self, entries: list[QueueEntry] | None = None) -> list[ReviewDecision]:
        """The decisions other runs on the store made on this run's items, under this run's ids.

        One item can sit in several runs' queues: a run that reused run A's child "X" queues it as "X@A"
        (benchfill.engine.memory_store.foreign_id). A's reviewers' decisions on "X", and another reuser's on
        "X@A", are decisions on the same item, so they count here too: a child rejected in the run that
        made it is not released by the run that reused it (and the memory, pooling the same decisions
        under the rule the making run kept, bars it from reuse and from being a parent)."""
        run = self.store.run_id
        own: dict[tuple[str, str], str] = {}  # (another run, its id of the item) -> this run's id
        anywhere: dict[str, str] = {}  # a reuser's id of the item, in any other run -> this run's id
        for e in self.entries if entries is None else entries:
            anywhere[f"{e.item_id}@{run}"] = e.item_id  # another run reused this run's child
            name = e.item_id
            while "@" in name:  # "X@A" is A's "X"; "X@A@B" is B's "X@A" and so A's "X"
                anywhere.setdefault(name, e.item_id)
                base, _, origin = name.rpartition("@")
                if origin != run:
                    own.setdefault((origin, base), e.item_id)
                name = base
        names = sorted({i for _, i in own} | set(anywhere))
        if not names:
            return []
        found: list[ReviewDecision] = []
        with self.store.session() as s:
            for chunk in (names[k:k + 500] for k in range(0, len(names), 500)):  # SQL parameter limits
                q = select(ReviewDecision).where(ReviewDecision.run_id != run, col(ReviewDecision.item_id).in_(chunk))
                for d in s.exec(q):
                    mine = own.get((d.run_id, d.item_id)) or anywhere.get(d.item_id)
                    if mine is not None:
                        found.append(d.model_copy(update={"item_id": mine}))
        return found


def _options_field(entry: QueueEntry) -> str:
    field = entry.options_field
    if field is None:
        raise BenchfillError(f"decision on '{entry.item_id}': the item has no options to edit")
    return field


def _options_like(entry: QueueEntry, base: dict[str, Any], lines: str) -> Any:
    """Edited options, one a line, in the layout the item keeps them in: a list, or the Hugging Face
    {"text": [...], "label": [...]} (labels kept where the count is, else letters). An item with an option of
    several lines (code) cannot be edited one a line: one option would become several."""
    import re

    old = base.get(_options_field(entry))
    if any("\n" in str(o) for o in options_of(old) or []):
        raise BenchfillError(f"decision on '{entry.item_id}': an option of this item spans several lines, which an "
                             "edit of one option a line would split; edit the options in the benchmark's items file")
    from benchfill.evaluators.multiple_choice import LETTERS as GRADED  # (the graders load only when edited)

    # the label off first, then blank ones dropped: "B. " (or "B." and a filler) was kept as an empty option
    # split at line breaks only: str.splitlines also breaks at \x0b, \x0c, \x1c-\x1e, \x85, U+2028 and U+2029,
    # which options carry (MMLU-Pro's "\vert" was published as \x0b + "ert"), and the key would name another option
    rows = re.split(r"\r\n|\r|\n", lines)
    # each line's label is dropped where the lines carry the page's labels: most of them labelled, each label
    # once, and every one among the letters the item's options had (A to the last; lines moved, deleted or
    # retyped without one among them). Otherwise the options are typed plain, and one that begins like a
    # label keeps its first word ("E. coli" among unlabelled ones; "T. rex", "E. coli", "H. pylori").
    label = re.compile(r"^\s*([A-Z])[.)](?:\s+|$)")
    filled = [x for x in rows if not _blank(x)]
    marks = [m[1] for x in filled if (m := label.match(x))]
    shown = LETTERS[: len(options_of(old) or [])]
    lettered = (2 * len(marks) > len(filled) and len(set(marks)) == len(marks) and all(c in shown for c in marks))
    opts = [o for o in ((label.sub("", x, count=1) if lettered else x).strip() for x in filled) if not _blank(o)]
    if len(opts) < 2:
        raise BenchfillError(f"decision on '{entry.item_id}': edited options must be two or more, one a line")
    if len(opts) > len(GRADED):
        raise BenchfillError(f"decision on '{entry.item_id}': {len(opts)} options; the multiple-choice grader reads "
                             f"at most {len(GRADED)} (A to {GRADED[-1]})")
    if isinstance(old, dict):
        labels = old.get("label")
        keep = isinstance(labels, list) and len(labels) == len(opts)
        return {**old, "text": opts, "label": labels if keep else list(LETTERS[: len(opts)])}
    return opts


def _key_position(entry: QueueEntry, item: dict[str, Any]) -> tuple[int | None, list] | None:
    """Which option ``item``'s key names, read as the grader reads it (a letter, "(G)", an index, or a Hugging
    Face label), with the options; None for an item with no options."""
    field = entry.options_field
    raw = None if field is None else item.get(field)
    opts = options_of(raw)
    if opts is None:
        return None
    key = item.get(entry.answer_field)
    labels = [str(x) for x in raw["label"]] if isinstance(raw, dict) and isinstance(raw.get("label"), list) else None
    if labels is not None and str(key).strip() in labels:
        return labels.index(str(key).strip()), opts
    if isinstance(key, int) and not isinstance(key, bool):
        return key, opts
    letter = str(key).strip().strip("()").upper()
    return (LETTERS.index(letter) if len(letter) == 1 and letter in LETTERS else None), opts


def _check_key(entry: QueueEntry, base: dict[str, Any], item: dict[str, Any], answer_given: bool) -> None:
    """An edit that leaves a multiple-choice key naming no option is refused (the key "J" of ten options, the
    options cut to four), and so is an options edit after which the key names another of the options it had
    (one dropped or reordered: the letter then names another), unless the answer came with it. The keyed
    option reworded in place (a typo fixed) is no move."""
    was, now = _key_position(entry, base), _key_position(entry, item)
    if now is None or was is None or was[0] is None:
        return  # no options, or a key that names none even before the edit (the option's text): not checked
    pos, opts = now
    if pos is None or not 0 <= pos < len(opts):
        raise BenchfillError(f"decision on '{entry.item_id}': the answer {item.get(entry.answer_field)!r} names no "
                             f"option (the item has {len(opts)})")
    if answer_given:
        return
    old = [str(o).strip() for o in was[1]]
    keyed = old[was[0]] if 0 <= was[0] < len(old) else None
    named = str(opts[pos]).strip()
    moved = keyed in [str(o).strip() for o in opts] and named != keyed  # the keyed option now at another letter
    other = named != keyed and named in old  # the letter now names another of the options
    if moved or other:
        raise BenchfillError(f"decision on '{entry.item_id}': with the options edited, the answer "
                             f"{item.get(entry.answer_field)!r} names {named!r}, where it named {keyed!r}; give "
                             "the answer too (the option that is right)")



# Characters that show nothing and are neither spaces nor format characters (Cf): the Hangul fillers, the combining
# grapheme joiner, Khmer's inherent vowels, variation selectors, the Mongolian free variation selectors, and the
# blank Braille pattern (Unicode's default-ignorable code points outside Cf, and U+2800)
_SHOWS_NOTHING = frozenset("\u115f\u1160\u3164\uffa0\u034f\u17b4\u17b5\u2800\u180b\u180c\u180d\u180f"
                           + "".join(map(chr, range(0xFE00, 0xFE10))))


def _blank(s: str) -> bool:
    """Nothing a reader would see: only whitespace, control characters, bidi marks (``untrusted.controls_in``),
    other format characters (a zero-width space, a BOM) and the letters and marks that show nothing
    (``_SHOWS_NOTHING``, the variation selectors of the supplement too). A lone NUL, and then a lone Hangul
    filler, had passed as an edited text."""
    return all(c.isspace() or untrusted.controls_in(c) or unicodedata.category(c) == "Cf" or c in _SHOWS_NOTHING
               or 0xE0100 <= ord(c) <= 0xE01EF for c in s)


def _same_text(new: str, old: Any) -> bool:
    """The same text to a reader: equal once both are in NFC and trailing spaces are off every line."""
    if not isinstance(old, str):
        return False

    def plain(v: str) -> str:
        return "\n".join(line.rstrip() for line in unicodedata.normalize("NFC", v).rstrip().split("\n"))

    return plain(new) == plain(old)


def _like(old: Any, new: str) -> Any:
    if isinstance(old, bool) or not isinstance(old, int | float):
        return new
    try:
        return int(new) if isinstance(old, int) else float(new)
    except ValueError:
        return new
