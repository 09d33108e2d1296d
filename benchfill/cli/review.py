"""`benchfill review export|serve|import` and `benchfill release [diff|verify]`.

Thin handlers over benchfill.review and benchfill.release, imported inside each
handler so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from benchfill.cli.argtypes import port


def register(subparsers) -> None:
    review = subparsers.add_parser("review", help="human review of proposed items (export, web page, import)")
    rsub = review.add_subparsers(dest="review_command", metavar="ACTION", required=True)

    p = rsub.add_parser("export", help="write the review queue as JSONL and CSV")
    p.add_argument("run", type=Path, help="run directory")
    p.add_argument("--out", type=Path, help="output directory (default: RUN/review)")
    p.set_defaults(func=_export)

    p = rsub.add_parser("serve", help="serve the review page on 127.0.0.1 (URL with a session token)")
    p.add_argument("run", type=Path, help="run directory")
    p.add_argument("--port", type=port, default=0, help="port on 127.0.0.1 (default: any free port)")
    _rule_args(p, kept="the rule the run's page was served with before")
    p.set_defaults(func=_serve)

    p = rsub.add_parser(
        "import",
        help="record decisions filled into an exported CSV",
        description=f"Record the decisions filled into an exported review_queue.csv. {DECISION_HELP}",
    )
    p.add_argument("file", type=Path, help="the CSV (columns reviewer, decision, reason, edited_text, edited_answer, "
                   "edited_options)")
    p.add_argument("--run", type=Path, help="run directory (default: the run whose review/ folder holds the CSV, where "
                   "'review export' writes it without --out)")
    p.add_argument("--reviewer", help="reviewer name for rows whose reviewer cell is empty")
    # all of a sheet or none of it is recorded, and a rerun records only what is not: "rerun" is always right
    p.set_defaults(func=_import, resumable=True)

    rel = subparsers.add_parser(
        "release",
        help="write a versioned release; `release diff A B`; `release verify DIR`",
        description="benchfill release RUN --version X.Y.Z | benchfill release diff A B | benchfill release verify DIR",
        # (argparse writes nargs="+" as "X [X ...]", which repeated the three forms)
        usage="benchfill release RUN --version X.Y.Z [--out DIR] [--min-accepts N] [--max-rejects N]\n"
              "                         [--remove ITEM_ID --removed-by NAME [--reason R]]\n"
              "       benchfill release diff A B\n"
              "       benchfill release verify DIR [--sha256 HEX | --run RUN] [--copy]",
    )
    rel.add_argument("args", nargs="+", metavar="RUN | diff A B | verify DIR")
    rel.add_argument("--version", dest="release_version", metavar="X.Y.Z", help="semantic version of the new release (X.Y.Z, each at most 9999)")
    rel.add_argument("--out", type=Path, help="releases root (default: releases/ beside the run directory)")
    rel.add_argument("--remove", action="append", default=[], metavar="ITEM_ID",
                     help="drop a generated item of the previous release (repeatable; needs --removed-by)")
    rel.add_argument("--removed-by", metavar="NAME", help="the reviewer removing the --remove items")
    rel.add_argument("--reason", default="", help="why the --remove items go (recorded in the CHANGELOG)")
    rel.add_argument("--sha256", metavar="HEX", help="verify: the manifest's sha256 as `release` printed it")
    rel.add_argument("--run", type=Path, help="verify: the run whose store recorded the release's manifest sha256")
    rel.add_argument("--copy", action="store_true",
                     help="verify: a copy away from its benchmark's release folder, as downloaded from the Hub "
                          "(its folder's name and place are not checked; the Hub's own files are left out)")
    _rule_args(rel)
    # a release stopped after its folder was published and before the store recorded it is finished by the
    # same command ("finished the interrupted release"): the stop's or the store's line says to rerun it
    rel.set_defaults(func=_release, resumable=lambda a: a.args[0] not in ("diff", "verify"))


# The words of benchfill.review.DECISIONS (not imported here: --help stays light; a test keeps them equal).
DECISION_WORDS = ("accept", "reject", "edit", "withdraw")
DECISION_HELP = (
    f"The decision cell takes one of: {', '.join(DECISION_WORDS)} (edit: put the new text in edited_text, "
    "the new answer in edited_answer and/or a multiple-choice item's options, one a line, in edited_options; "
    "withdraw: take back your own earlier decision); rows with an empty decision are skipped."
)


def _rule_args(p: argparse.ArgumentParser, kept: str = "the rule the review page was last served with") -> None:
    p.add_argument("--min-accepts", type=int, help=f"release rule: accepts needed (default: {kept}, else 1)")
    p.add_argument("--max-rejects", type=int, help=f"release rule: rejects tolerated (default: {kept}, else 0)")


def _rule(args):
    """The rule the flags give, or None: the run's kept rule (the review page's), else the default."""
    from benchfill.review import ReleaseRule

    if args.min_accepts is None and args.max_rejects is None:
        return None
    return ReleaseRule(min_accepts=1 if args.min_accepts is None else args.min_accepts,
                       max_rejects=0 if args.max_rejects is None else args.max_rejects)


def _export(args) -> int:
    from benchfill.review import export_queue

    if args.out is not None:  # named by its flag: a read-only folder was named by an internal temp file
        from benchfill.cli.output import check_out_dir

        check_out_dir(str(args.out), "--out", ("review_queue.export.jsonl", "review_queue.csv"))
    jsonl, csv_path = export_queue(args.run, args.out)
    print(f"wrote {jsonl}\nwrote {csv_path}")
    return 0


def _serve(args) -> int:
    from benchfill.review.server import serve

    serve(args.run, port=args.port, rule=_rule(args))
    return 0


def _import(args) -> int:
    from benchfill.errors import ConfigError, DataError
    from benchfill.review import import_decisions

    if not args.file.is_file():  # before guessing its run from where it lies, which a missing file cannot tell
        raise DataError(f"{args.file}: no such file")
    run = args.run
    if run is None:
        guess = args.file.resolve().parent.parent
        has_store = (guess / "store.db").is_file() or (guess / "store.url").is_file()
        if not (has_store and (guess / "review_queue.jsonl").is_file()):
            raise ConfigError(f"{args.file}: cannot tell which run it belongs to (it does not lie in a run's review/ "
                              "folder); pass --run RUN")
        run = guess
    n = import_decisions(run, args.file, reviewer=args.reviewer)
    print(f"recorded {n} decision(s) from {args.file} in the store of {run}")
    if n == 0:
        print(f"hint: no row had a new decision. {DECISION_HELP} A decision already recorded is not recorded twice.")
    return 0


# release's flags (flag, dest, default), and the modes each applies to where not the release itself
_RELEASE_FLAGS = (("--version", "release_version", None), ("--out", "out", None), ("--remove", "remove", []),
                  ("--removed-by", "removed_by", None), ("--reason", "reason", ""), ("--sha256", "sha256", None),
                  ("--run", "run", None), ("--min-accepts", "min_accepts", None),
                  ("--max-rejects", "max_rejects", None), ("--copy", "copy", False))
_FLAG_MODES = {"--sha256": ("verify",), "--run": ("verify",), "--copy": ("verify",)}


def _release(args) -> int:
    from benchfill.errors import ConfigError
    from benchfill.release import diff_releases, release, verify_release

    words = args.args
    mode = words[0] if words[0] in ("diff", "verify") else "release"
    given = [flag for flag, dest, default in _RELEASE_FLAGS
             if getattr(args, dest) != default and mode not in _FLAG_MODES.get(flag, ("release",))]
    if given:  # a flag that would be ignored: say so rather than act as if it were used
        raise ConfigError(f"{given[0]}: does not apply to `benchfill release{'' if mode == 'release' else ' ' + mode}`")
    if words[0] == "diff":
        if len(words) != 3:
            raise ConfigError("usage: benchfill release diff A B (two release directories)")
        print("\n".join(diff_releases(Path(words[1]), Path(words[2])).lines()))
        return 0
    if words[0] == "verify":
        if len(words) != 2:
            raise ConfigError("usage: benchfill release verify DIR [--sha256 HEX | --run RUN] [--copy]")
        want = args.sha256
        if want is not None and args.run is not None:
            raise ConfigError("--sha256 and --run: give one (--run reads the sha256 its store recorded)")
        if want is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", want.strip()):
            raise ConfigError(f"--sha256: not a sha256 (64 hexadecimal digits), got {want!r}")
        if args.run is not None:
            from benchfill.release import recorded_sha256

            want = recorded_sha256(words[1], args.run)
            if want is None:
                raise ConfigError(f"--run {args.run}: its store records no release at {words[1]}")
        problems = verify_release(words[1], want, copy=args.copy)  # (a str: Path("") would be the current folder)
        if problems:
            # all on stderr, the error line first: stdout carries only what verifies
            from benchfill.untrusted import terminal

            print(f"benchfill: error: release does not verify ({len(problems)} problem(s)): {terminal(problems[0])}",
                  file=sys.stderr)
            if not args.copy and any("the folder is" in p or "the folder's parent is" in p or "symbolic link" in p
                                     for p in problems):
                print("  hint: a copy downloaded from the Hub, away from its benchmark's release folder? "
                      "add --copy", file=sys.stderr)
            for p in problems[1:]:
                print(f"  {terminal(p)}", file=sys.stderr)
            return 2
        from benchfill.release import manifest_sha256

        digest = manifest_sha256(words[1])
        print(f"{words[1]}: every file matches manifest.json (sha256 {digest}"
              + (", as recorded)" if want else "; compare it with the one `release` printed, or pass --sha256)"))
        return 0
    if len(words) != 1:
        raise ConfigError("usage: benchfill release RUN --version X.Y.Z")
    if not args.release_version:
        raise ConfigError("release: --version X.Y.Z is required")
    if args.remove and not args.removed_by:
        raise ConfigError("release: --remove needs --removed-by NAME (the reviewer removing the items)")
    why = f"{args.removed_by}: {args.reason}" if args.reason else f"removed by {args.removed_by}"
    if args.out is not None:  # named by its flag, before the run is read: a file in the way, no write access
        from benchfill.cli.output import check_out_dir

        check_out_dir(str(args.out), "--out", ())
    res = release(Path(words[0]), args.release_version, out=args.out, rule=_rule(args),
                  remove=dict.fromkeys(args.remove, why))
    head = ("finished the interrupted release " if res.resumed
            else "already released, as this command would release it now (nothing decided since): " if res.complete
            else "released ")  # fmt: skip
    print(head + f"{res.version}: {res.n_original} original + {res.n_generated} generated item(s) at {res.path}\n"
          f"manifest sha256 {res.manifest_sha256}")  # fmt: skip
    if res.carried or res.removed or res.changed:
        print(f"from the previous release: {len(res.carried)} carried forward, {len(res.removed)} removed, "
              f"{len(res.changed)} changed")
    if res.originals:
        o = res.originals
        parts = [f"{len(o[k])} {k}" for k in ("added", "removed", "changed") if o[k]]
        from benchfill.release_carry import originals_effect

        print(f"note: the original items differ from the previous release's ({', '.join(parts)}; the changelog "
              f"names them): {originals_effect(o['added'], o['removed'])}", file=sys.stderr)
    if res.rule_note:
        print(f"note: {res.rule_note}", file=sys.stderr)
    if res.pending:
        more = f" (+{len(res.pending) - 5})" if len(res.pending) > 5 else ""
        print(f"note: {len(res.pending)} item(s) of this run still await review and are not in {res.version}: "
              f"{', '.join(res.pending[:5])}{more}", file=sys.stderr)
    if res.same_text:
        from benchfill.untrusted import terminal

        pairs = ", ".join(f"{a} = {b}" for a, b in res.same_text[:5])
        more = f" (+{len(res.same_text) - 5})" if len(res.same_text) > 5 else ""
        print(f"note: {len(res.same_text)} generated item(s) in {res.version} have the text of another item "
              f"there: {terminal(pairs)}{more}; a reviewer's reject or edit takes one out", file=sys.stderr)
    if res.held:
        print(f"note: {len(res.held)} accepted item(s) of this run stay out of {res.version}, removed from an "
              f"earlier release: {', '.join(res.held)} (an accept or edit of one made after its removal puts it "
              "back)", file=sys.stderr)
    return 0
