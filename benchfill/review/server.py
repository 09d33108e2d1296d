"""The local review page: starlette + uvicorn on 127.0.0.1 with a per-session token.

Every request must carry the token (``?token=`` once, then a cookie set from it, or
the ``X-Benchfill-Token`` header); a decision POST must carry it in the header, so a
page on another site cannot forge one with the cookie. The Host header must name
loopback (no DNS rebinding). Item text is escaped server-side and set with
textContent client-side: nothing from an item is ever parsed as HTML.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import socket
import threading
import time
from html import escape
from importlib.resources import files
from pathlib import Path
from string import Template
from typing import Any
from urllib.parse import quote

from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from benchfill import untrusted
from benchfill.asgi import quiet_config
from benchfill.errors import BenchfillError
from benchfill.redact import scrub
from benchfill.review.board import Changed, ReviewBoard
from benchfill.review.queue import QueueEntry, text_diff
from benchfill.review.rule import Outcome, ReleaseRule, latest_per_reviewer, outcome, reviewer_key
from benchfill.store import ReadOnlyStore

HOST = "127.0.0.1"
COOKIE = "benchfill_token"
HEADER = "x-benchfill-token"
STATIC = {"review.js": "text/javascript", "review.css": "text/css"}


def create_app(board: ReviewBoard, token: str, port: int | None = None) -> Starlette:
    """The review app over ``board``; ``port`` (when known) pins the accepted Host header."""
    shell = Template(files("benchfill.review").joinpath("review.html").read_text(encoding="utf-8"))
    hosts = {HOST, "localhost"} | ({f"{HOST}:{port}", f"localhost:{port}"} if port else set())

    def page(title: str, body: str) -> HTMLResponse:
        if any(e.record.get("simulated") for e in board.entries):
            # A reviewer must not take a simulated wrong answer, or a simulated difficulty, for a real one.
            body = ("<p class='simulated' id='simulated-banner'><strong>SIMULATED RUN</strong>: these items, "
                    "their answers, verdicts and difficulties come from benchfill's simulated world, not from "
                    "real models.</p>" + body)
        html = shell.substitute(title=escape(title), token=escape(token), benchmark=escape(board.benchmark),
                                rule=escape(board.rule.describe()), body=body)  # fmt: skip
        return HTMLResponse(html, headers={"Content-Security-Policy": CSP,
                                           "Cache-Control": "no-store", "X-Frame-Options": "DENY"})  # fmt: skip

    async def queue(request: Request) -> Response:
        outcomes = board.outcomes()
        removed = board.removed(outcomes)
        rows = "".join(_queue_row(e, outcomes[e.item_id], removed.get(e.item_id)) for e in board.entries)
        removed = {i: line for i, line in removed.items() if outcomes[i].status == "accepted"}  # else its own status
        counts = {k: sum(o.status == k for o in outcomes.values()) for k in ("pending", "accepted", "rejected")}
        counts["accepted"] -= len(removed)
        tally = ", ".join(f"{n} {k}" for k, n in counts.items()) + (f", {len(removed)} removed" if removed else "")
        none_left = ("<p id='none-left'><strong>No pending item is left for you to review.</strong></p>"
                     if request.query_params.get("pending") == "none" else "")
        body = (
            f"<h1>Review queue ({len(board.entries)} proposed items)</h1><p id='tally'>{tally}</p>{none_left}"
            "<p class='keys'><a class='pending' href='/next' aria-keyshortcuts='n'>Review your next pending "
            "item</a> (key <kbd>n</kbd>; an item page shows its keys at the top)</p>"
            "<div id='queue-wrap'><table id='queue'><tr><th>item</th>"
            "<th>gap</th><th>target z</th><th>confirmed z</th><th>judge</th><th>flags</th><th>status</th></tr>"
            f"{rows}</table></div>"
        )
        return page("benchfill review queue", body)

    async def item(request: Request) -> Response:
        item_id = request.path_params["item_id"]
        try:
            entry = board.entry(item_id)
        except BenchfillError as exc:
            return PlainTextResponse(str(exc), status_code=404)
        ids = [e.item_id for e in board.entries]
        at = ids.index(item_id)
        near = (ids[at - 1] if at else None, ids[at + 1] if at + 1 < len(ids) else None)
        now = board.outcome_of(item_id)  # this item's decisions alone, read once for the page and its version
        return page(f"review {item_id}", _item_body(entry, now, *near, run=board.store.run_id,
                                                    seen=board.version(item_id, now), code=board.code_fields(),
                                                    removed=board.removed({item_id: now}, only=item_id).get(item_id)))

    async def next_pending(request: Request) -> Response:
        # Where the page goes after an accept or a reject, and the queue page's "n".
        after = request.query_params.get("after", "")
        reviewer = request.query_params.get("reviewer", "").strip()
        found = _next_pending(board, after, reviewer)
        if found:
            return RedirectResponse(f"/item/{quote(found, safe='')}", status_code=303)
        # none left: the queue, saying so (it reloaded silently, and a reviewer could not tell "n" had done
        # anything); but not where the item just left is itself still pending for this reviewer
        left = after and _next_pending(board, "", reviewer) == after
        return RedirectResponse("/" if left else "/?pending=none", status_code=303)

    async def decide(request: Request) -> Response:
        # bytes, as the guard compares them: compare_digest raises on a str holding a non-ASCII character
        if not secrets.compare_digest(request.headers.get(HEADER, "").encode(), token.encode()):
            return JSONResponse({"error": "missing or wrong token header"}, status_code=403)
        try:
            data = await request.json()
        except (ValueError, RecursionError):  # (nested too deeply: a traceback and a 500 before)
            return JSONResponse({"error": "body is not JSON"}, status_code=400)
        if not isinstance(data, dict):
            return JSONResponse({"error": "body must be a JSON object"}, status_code=400)
        fields = {k: data.get(k) for k in ("item_id", "reviewer", "decision", "reason", "text", "answer", "seen",
                                           "options")}  # fmt: skip
        if any(v is not None and not isinstance(v, str) for v in fields.values()):
            return JSONResponse({"error": "every field must be a string"}, status_code=400)
        try:
            # off the event loop: an edit of a code item runs its tests (up to 10 s), and every other reviewer's
            # page waited on it; decisions still take turns (the run folder's lock, inside decide)
            row = await run_in_threadpool(
                board.decide, fields["item_id"] or "", fields["reviewer"] or "", fields["decision"] or "",
                fields["reason"] or "", text=fields["text"], answer=fields["answer"], source="page",
                seen=fields["seen"], options=fields["options"],
            )  # fmt: skip
        except ReadOnlyStore as exc:  # the server's trouble, not the reviewer's input
            return JSONResponse({"error": str(exc)}, status_code=503)
        except DBAPIError as exc:  # the store's too (a full disk, a lock held past its wait): said, not a bare 500
            said = scrub(" ".join(str(exc.orig or exc).split()))[:200]
            return JSONResponse({"error": f"store {board.store.where}: the decision could not be written ({said}); "
                                          "nothing was recorded: decide again once it can be"}, status_code=503)
        except Changed as exc:  # another reviewer's edit landed since the page was drawn
            return JSONResponse({"error": str(exc)}, status_code=409)
        except BenchfillError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse({"id": row.id, "item_id": row.item_id, "decision": row.decision})

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return PlainTextResponse("not found", status_code=404)
        return Response(files("benchfill.review").joinpath(name).read_text(encoding="utf-8"), media_type=STATIC[name])

    # One cookie name per server: cookies are per host, not per port, so two review pages open at once
    # on 127.0.0.1 would overwrite each other's token under one name.
    cookie = f"{COOKIE}_{hashlib.sha256(token.encode()).hexdigest()[:12]}"

    async def guard(request: Request, call_next):
        response = await _guarded(request, call_next)
        # every answer is what its Content-Type says: a text/plain 404 echoing an item id is never sniffed
        # into HTML by a browser
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    async def _guarded(request: Request, call_next):
        if request.headers.get("host", "") not in hosts:
            return PlainTextResponse("forbidden host", status_code=403)
        given = request.query_params.get("token") or request.headers.get(HEADER) or request.cookies.get(cookie, "")
        if not secrets.compare_digest(given.encode(), token.encode()):
            message = ("forbidden: this page needs the token printed by `benchfill review serve` (a restarted "
                       "server prints a new one, and with the default --port 0 a new port too)")
            if request.url.path.startswith("/api/"):  # the page's script reads JSON
                return JSONResponse({"error": message + "; copy what you typed before you open it"}, status_code=403)
            return PlainTextResponse(message, status_code=403)
        response = await call_next(request)
        if request.query_params.get("token"):
            response.set_cookie(cookie, token, httponly=True, samesite="strict", path="/")
        return response

    routes = [
        Route("/", queue), Route("/item/{item_id:path}", item), Route("/next", next_pending),
        Route("/api/decision", decide, methods=["POST"]), Route("/static/{name}", static),
    ]  # fmt: skip
    app = Starlette(routes=routes, middleware=[Middleware(BaseHTTPMiddleware, dispatch=guard)])
    return app


def _next_pending(board: ReviewBoard, after: str, reviewer: str) -> str | None:
    """The first item after ``after`` in queue order (wrapping round, ``after`` itself left out) that is
    pending under the board's rule and on which ``reviewer`` (when named) has no standing decision."""
    outcomes = board.outcomes()
    ids = [e.item_id for e in board.entries]
    start = ids.index(after) + 1 if after in ids else 0
    for item_id in ids[start:] + ids[:start]:
        o = outcomes[item_id]
        if item_id == after or o.status != "pending":
            continue
        mine = latest_per_reviewer(o.decisions).get(reviewer_key(reviewer)) if reviewer else None
        if mine is None or mine.decision == "withdraw":
            return item_id
    return None


def _item_link(item_id: str | None, rel: str, key: str, label: str) -> str:
    if item_id is None:
        return f"<span class='none'>{label}</span>"
    href = f"/item/{escape(quote(item_id, safe=''))}"
    return f"<a rel='{rel}' href='{href}' aria-keyshortcuts='{key}' title='{escape(item_id)}'>{label}</a>"


def _item_nav(item_id: str, prev: str | None, next_: str | None) -> str:
    """Previous / next in queue order and the shortcut keys, at the top of an item page."""
    pending = f"/next?after={escape(quote(item_id, safe=''))}"
    return (f"<nav id='item-nav' aria-label='items'>{_item_link(prev, 'prev', 'p', '&larr; previous')} &middot; "
            f"<a href='/'>queue</a> &middot; {_item_link(next_, 'next', 'n', 'next &rarr;')} &middot; "
            f"<a class='pending' href='{pending}'>next pending item</a></nav>"
            "<p class='keys' id='keys'>Keys, outside a text field: <kbd>a</kbd> accept &middot; <kbd>r</kbd> "
            "reject (type the reason, then <kbd>Enter</kbd>) &middot; <kbd>e</kbd> edit (<kbd>Ctrl</kbd>+"
            "<kbd>Enter</kbd> saves) &middot; <kbd>n</kbd> / <kbd>p</kbd> next / previous item &middot; "
            "<kbd>q</kbd> queue. <kbd>Esc</kbd> leaves a text field and keeps what you typed. An accept or a "
            "reject moves on to your next pending item.</p>")  # fmt: skip


def _status(o: Outcome, removed: str | None = None) -> str:
    if removed is not None and o.status == "accepted":  # the rule passes it; the latest release keeps it out
        return f"<span class='status-removed'>removed</span> {escape(removed)}"
    who = ""
    if o.accepted_by:
        who += " accepted by " + ", ".join(o.accepted_by)
    if o.rejected_by:
        who += " rejected by " + ", ".join(o.rejected_by)
    return f"<span class='status-{o.status}'>{escape(o.status)}</span>{escape(who)}"


# form-action and base-uri do not fall back to default-src: without them an injected <form> or <base> could
# send a reviewer's input elsewhere even where no script runs
CSP = "default-src 'self'; object-src 'none'; form-action 'self'; base-uri 'none'"


def _num(x: Any, fmt: str = "{:.3f}") -> str:
    return fmt.format(x) if isinstance(x, int | float) and not isinstance(x, bool) else "&ndash;"


# What each flag a chosen item can carry means, in the words a reviewer needs (shown as the flag's tooltip
# and read by screen readers): a bare "beyond_reach" told a reviewer nothing they could act on.
FLAG_MEANINGS = {
    "outside_gap": "its confirmed difficulty lies outside the gap it was made for: the gap counts as not filled",
    "beyond_reach": "the probe panel cannot place it precisely enough to tell whether it lies inside its gap",
    "near_duplicate": "its text nearly repeats an item already in the benchmark",
    "order_anomaly": "strong probes fail what weak ones solve: the mark of a wrong reference answer",
    "widens_coverage": "it may lie beyond the benchmark's easiest or hardest item, where it would open a new gap",
    "reused": "an earlier run's item, taken from the shared memory",
    "outside_range": "its estimated difficulty lies beyond the benchmark's easiest or hardest item",
    "no_finite_mle": "its difficulty has no finite estimate from the probes' answers (see the other flags)",
    "all_correct": "every probe answered it correctly",
    "all_wrong": "no probe answered it correctly",
    "at_or_below_chance": "the probes did no better than guessing",
    "diverged": "its difficulty estimate did not converge",
}


def _flags(e: QueueEntry) -> str:
    # a space between: read aloud or copied they were one word ("near_duplicateoutside_gap")
    return " ".join(f"<span class='flag' title='{escape(FLAG_MEANINGS.get(str(f), str(f)))}'>{escape(str(f))}</span>"
                    for f in e.flags)


def _flags_explained(e: QueueEntry) -> str:
    """An item page's flags with what each means, written out (a tooltip alone is out of reach of a keyboard
    or a touch screen)."""
    if not e.flags:
        return ""
    said = "".join(f"<li><span class='flag'>{escape(str(f))}</span> {escape(FLAG_MEANINGS.get(str(f), ''))}</li>"
                   for f in e.flags)
    return f"<h2>Flags</h2><ul id='flags'>{said}</ul>"


def _queue_row(e: QueueEntry, o: Outcome, removed: str | None = None) -> str:
    r = e.record
    gap = r.get("gap") or {}
    conf = r.get("confirmed") or {}
    judge = r.get("judge") or {}
    return (
        f"<tr><td><a href='/item/{escape(quote(e.item_id, safe=''))}'>{escape(e.item_id)}</a></td>"
        f"<td>{_num(gap.get('left'))} &ndash; {_num(gap.get('right'))}</td><td>{_num(r.get('target_z'))}</td>"
        f"<td>{_num(conf.get('z'))}</td><td>{'valid' if judge.get('valid') else 'invalid'}</td>"
        f"<td>{_flags(e)}</td><td class='status'>{_status(o, removed)}</td></tr>"
    )


def _estimate(d: dict | None) -> str:
    d = d or {}
    # placement_z_se: where the item sits on the benchmark's z scale, the panel's ability error included
    where = f" &plusmn; {_num(d['placement_z_se'])}" if d.get("placement_z_se") is not None else ""
    return f"b = {_num(d.get('difficulty'))} &plusmn; {_num(d.get('se'))} (z = {_num(d.get('z'))}{where})"


def _gap(r: dict) -> str:
    """The gap's edges on z, so that a confirmed z can be checked against them."""
    g = r.get("gap") or {}
    if g.get("left") is None:
        return ""
    try:  # its width, which says how near the edges an item has to land (a tampered record: no width)
        width = f" (width {_num(float(g['right']) - float(g['left']))})"
    except (TypeError, ValueError, KeyError):
        width = ""
    return f"[{_num(g.get('left'))}, {_num(g.get('right'))}]{width}"


def _truth(r: dict) -> str:
    """The simulated world's difficulty of the item, on the run's fitted scale where the record has it, so that
    it compares with the estimates above it; a record written before carries the world's own scale only."""
    if "true_z" in r:
        return (f"<li>true difficulty (simulated world, on this run's fitted scale): <span id=\"true-difficulty\">"
                f"b = {_num(r.get('true_difficulty'))} (z = {_num(r.get('true_z'))})</span></li>")
    return (f"<li>true difficulty (simulated world, on the world's own scale, not this run's fitted one: not "
            f"comparable with the estimates above): {_num(r.get('true_difficulty'))}</li>")


def _item_body(e: QueueEntry, o: Outcome, prev: str | None = None, next_: str | None = None, run: str = "",
               seen: str = "", code: tuple[str, str] | None = None, removed: str | None = None) -> str:
    """``removed``: the line ``ReviewBoard.removed`` gives an item its latest release keeps out. ``seen``: the item's version (``ReviewBoard.version``) as drawn; each decision sends it back. ``code``:
    a code benchmark's (tests field, entry point field), whose tests are shown beside each side."""
    r = e.record
    pieces = text_diff(str(e.ancestor.get(e.text_field, "")), str(e.child.get(e.text_field, "")))
    old = "".join(_shown(t) if op == "=" else f"<del>{_shown(t)}</del>" for op, t in pieces if op != "+")
    new = "".join(_shown(t) if op == "=" else f"<ins>{_shown(t)}</ins>" for op, t in pieces if op != "-")
    probes = "".join(
        f"<tr><td>{_shown(str(p.get('probe')))}</td><td>{_num(p.get('ability'), '{:.2f}')}</td>"
        f"<td>{_shown(str(p.get('correct')))}/{_shown(str(p.get('trials')))}</td></tr>"
        for p in r.get("probe_results") or []
    )
    judge = r.get("judge") or {}
    sim = r.get("simulated")
    truth = _truth(r) if sim else ""
    p_in = r.get("inside_probability")  # records written before the field have none
    inside = ("" if p_in is None else f"<li>chance it lies inside its gap as fitted (by that estimate and its se; the "
              "edges' own fit error not counted): "
              f"<span id=\"inside-probability\">{_num(p_in, '{:.2f}')}</span></li>")
    decisions = "".join(
        f"<li>{_shown(d.reviewer)}: {_shown(d.decision)}{(' &ndash; ' + _shown(d.reason)) if d.reason else ''}"
        f" <small>{_shown(d.created_at.isoformat(timespec='seconds'))}"
        f"{'' if d.run_id == run else ' in run ' + _shown(d.run_id)}</small>{_edit_said(d, e, o.decisions[:k])}</li>"  # a reused item's, made elsewhere
        for k, d in enumerate(o.decisions)
    )
    current = o.edited_fields or e.child
    iid = _shown(e.item_id)
    # A code item's lines keep their place: wrapped, a long line's end started at column 0 and read as a
    # dedented line of its own. Such a block scrolls sideways instead.
    code_cls, wrap = (" code", ' wrap="off"') if code is not None else ("", "")
    edited = ""
    if o.edited_fields is not None:  # what a release would ship: the latest edit, shown against the proposal
        cut = text_diff(str(e.child.get(e.text_field, "")), str(current.get(e.text_field, "")))
        shown = "".join(_shown(t) if op == "=" else (f"<del>{_shown(t)}</del>" if op == "-" else f"<ins>{_shown(t)}</ins>")
                        for op, t in cut)
        head = "Kept out of releases (removed), as edited by" if removed and o.status == "accepted" else \
            "To be released: the edit by"
        edited = (f'<div class="edited{code_cls}"><h2>{head} {_shown(str(o.edited_by))}</h2>'
                  f'<pre id="edited-text">{shown}</pre>{_options_list("edited-options", current, e)}'
                  f'<div>Reference answer: {_answer("edited-answer", current, e)} '
                  f'(proposed: {_answer("", e.child, e)})</div><p>Only the edit and accepts given on it count '
                  "toward releasing it; the difficulty below was measured on the proposed item.</p></div>")
    return f"""
{_item_nav(e.item_id, prev, next_)}
<h1 tabindex="-1">{iid}</h1>
<p>Status: {_status(o, removed)} &middot; gap {_num(r.get("gap_index"), "{}")} {_gap(r)}{" &middot; flags: " + _flags(e) if e.flags else ""}</p>
{_flags_explained(e)}
<div class="side{code_cls}">
 <div><h2>Ancestor {_shown(str(r.get("ancestor_id")))}</h2><pre id="ancestor-text">{old}</pre>
  {_options_list("ancestor-options", e.ancestor, e)}
  <div>Reference answer: {_answer("ancestor-answer", e.ancestor, e)}</div>{_tests("ancestor-tests", e.ancestor, code)}</div>
 <div><h2>Proposed item</h2><pre id="child-text">{new}</pre>
  {_options_list("child-options", e.child, e)}
  <div>Reference answer: {_answer("child-answer", e.child, e)}</div>{_tests("child-tests", e.child, code)}</div>
</div>
{edited}
<h2>Difficulty</h2>
<ul><li>target: z = {_num(r.get("target_z"))}</li><li>annotated: {_estimate(r.get("annotated"))}</li>
<li>confirmed: {_estimate(r.get("confirmed"))}</li>{inside}<li>ECDF position in the benchmark: {_num(r.get("ecdf_position"))}</li>{truth}</ul>
<h2>Probe results</h2><table><tr><th>probe</th><th>ability</th><th>correct</th></tr>{probes}</table>
<h2>Judge</h2><p>{"valid" if judge.get("valid") else "invalid"} ({_shown(str(judge.get("model", r.get("judge_model", ""))))}): {_shown(str(judge.get("reason", "")))}</p>
<h2>Decisions</h2><ul id="decisions">{decisions}</ul>
<div class="actions">
<button id="accept" data-item="{iid}" data-seen="{seen}" data-decision="accept" aria-keyshortcuts="a">Accept</button>
<button id="withdraw" data-item="{iid}" data-decision="withdraw" title="take back your own decision on this item">Withdraw my decision</button>
<fieldset><legend>Reject</legend><label for="reject-reason">Reason (required)</label>
<input id="reject-reason" required aria-keyshortcuts="r" data-submit="reject">
<button id="reject" data-item="{iid}" data-seen="{seen}" data-decision="reject">Reject</button></fieldset>
<fieldset><legend>Edit and accept</legend>
<label for="edit-text">Text</label>
<textarea id="edit-text" rows="{_rows(current.get(e.text_field, ""), 40)}"{wrap} aria-keyshortcuts="e" data-submit="edit">
{escape(str(current.get(e.text_field, "")))}</textarea>
<label for="edit-answer">Answer</label>
<textarea id="edit-answer" rows="{_rows(current.get(e.answer_field, ""))}"{wrap} data-submit="edit">
{escape(str(current.get(e.answer_field, "")))}</textarea>{_options_edit(current, e)}
<label for="edit-reason">Note (optional)</label>
<input id="edit-reason" data-submit="edit">
<button id="edit" data-item="{iid}" data-seen="{seen}" data-decision="edit">Save edit</button></fieldset>
</div>"""


def _options_list(id_: str, item: dict, e: QueueEntry) -> str:
    """A multiple-choice item's options, lettered as the solver sees them ("" for an item with none): the key
    names one, and a reviewer who cannot see them cannot check it."""
    lines = e.options(item)
    if lines is None:
        return ""
    return f'<ol class="options" id="{id_}">' + "".join(f"<li>{_shown(x)}</li>" for x in lines) + "</ol>"


def _tests(id_: str, item: dict, code: tuple[str, str] | None) -> str:
    """A code item's tests and entry point, which its reference answer must pass ("" for other items): a
    rewriter's broken tests make an item look harder, and a reviewer who cannot see them cannot tell."""
    if code is None or item.get(code[0]) is None:
        return ""
    entry = _shown(str(item.get(code[1], "")))
    return (f'<details open><summary>Tests (entry point <code>{entry}</code>)</summary>'
            f'<pre class="answer" id="{id_}">{_shown(str(item.get(code[0])))}</pre></details>')


# What the browser would act on unseen (a bidi override reorders the text) is shown as its code point; the edit
# boxes keep the characters as they are, so that an edit sends back exactly what the item holds.
_shown = untrusted.html


def _edit_said(d: Any, e: QueueEntry, before: list[Any]) -> str:
    """What an edit decision set, field by field where it differs from the item as it stood when it was made
    (the edit in force by the decisions ``before`` it, else the proposal): the page's list of decisions, where
    a withdrawn or overridden edit is otherwise lost (the sheet's ``edited_to`` shows only the edit in force)."""
    if d.decision != "edit" or not d.edited_json:
        return ""
    try:
        fields = json.loads(d.edited_json)
    except ValueError:
        return ""
    base = outcome(e.item_id, before, ReleaseRule()).edited_fields or e.child
    changed = {k: v for k, v in fields.items() if base.get(k) != v} if isinstance(fields, dict) else {}
    if not changed:
        return ""
    rows = "".join(f"<dt>{_shown(str(k))}</dt><dd><pre>{_shown(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))}</pre></dd>"
                   for k, v in changed.items())
    return f"<details><summary>what this edit set</summary><dl>{rows}</dl></details>"


def _options_edit(current: dict, e: QueueEntry) -> str:
    lines = e.options(current)
    if lines is None:
        return ""
    return (f'\n<label for="edit-options">Options, one a line</label>\n<textarea id="edit-options" '
            f'rows="{min(len(lines), 20)}" data-submit="edit">\n{escape(chr(10).join(lines))}</textarea>')


def _answer(id_: str, item: dict, e: QueueEntry) -> str:
    """A reference answer as written: a code item's solution keeps its lines and indentation."""
    text = str(item.get(e.answer_field))
    tag = "pre" if "\n" in text else "code"
    named = f' id="{id_}"' if id_ else ""
    return f'<{tag} class="answer"{named}>{_shown(text)}</{tag}>'


def _rows(answer: Any, most: int = 20) -> int:
    return min(max(str(answer).count("\n") + 1, 1), most)


class ReviewServer:
    """The review page served in a background thread; a context manager for tests and tools."""

    def __init__(self, run_dir: str | Path, port: int = 0, rule: ReleaseRule | None = None):
        import uvicorn

        self.board = ReviewBoard(run_dir, rule)
        if rule is not None:  # the page shows this rule's view: a release without one will use it too
            self.board.keep_rule()
        self.token = secrets.token_urlsafe(24)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((HOST, port))
        except OSError as exc:
            self.sock.close()
            self.board.close()
            raise BenchfillError(f"cannot listen on {HOST}:{port}: {exc.strerror}") from None
        self.port = self.sock.getsockname()[1]
        app = create_app(self.board, self.token, self.port)
        config = quiet_config(app, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/?token={self.token}"

    def start(self) -> ReviewServer:
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise BenchfillError(f"the review page did not start on {HOST}:{self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=10)
        self.sock.close()
        self.board.close()

    def __enter__(self) -> ReviewServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(run_dir: str | Path, port: int = 0, rule: ReleaseRule | None = None) -> None:
    """Serve the review page until interrupted, printing its URL (with the token) first."""
    with ReviewServer(run_dir, port, rule) as srv:
        print(f"review page for {srv.board.benchmark}: {srv.url}", flush=True)
        if srv.board.store.read_only:
            print(f"note: store {srv.board.store.where} is read-only: the page shows the queue, and refuses "
                  "decisions; press Ctrl-C to stop", flush=True)
        else:
            print("decisions are saved as they are made; press Ctrl-C to stop", flush=True)
        # Ctrl-C (and SIGTERM) stop the page, and reach the command as any stop does: "interrupted", 130 (143)
        while srv.thread is not None and srv.thread.is_alive():
            srv.thread.join(0.5)
