"""The review page over real HTTP on loopback: token, CSRF, Host check, escaping, loopback-only bind."""

from __future__ import annotations

import shutil
import socket
import subprocess

import conftest
import httpx
import pytest
from test_review_support import CHILD_IDS, SCRIPT_ID, make_run

from benchfill.errors import BenchfillError
from benchfill.review import ReviewBoard
from benchfill.review.server import ReviewServer


@pytest.fixture
def server(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    with ReviewServer(run) as srv:
        yield srv


def _base(srv):
    return f"http://127.0.0.1:{srv.port}"


def test_requests_without_the_token_are_refused(server):
    base = _base(server)
    assert httpx.get(base + "/").status_code == 403
    assert httpx.get(base + "/?token=wrong").status_code == 403
    assert httpx.get(base + "/static/review.js").status_code == 403
    assert httpx.get(base + f"/item/{CHILD_IDS[0]}").status_code == 403
    r = httpx.post(base + "/api/decision", json={"item_id": CHILD_IDS[0], "reviewer": "x", "decision": "accept"})
    assert r.status_code == 403 and "restarted server prints a new one" in r.json()["error"]  # JSON for the script
    ok = httpx.get(server.url)
    assert ok.status_code == 200 and all(i in ok.text for i in CHILD_IDS)
    # no answer is sniffed into another type: a text/plain 404 that echoes an item id stays text
    missing = httpx.get(server.url.replace("/?", "/item/%3Cb%3Ex%3C%2Fb%3E?"))
    assert missing.status_code == 404 and missing.headers["x-content-type-options"] == "nosniff"
    assert ok.headers["x-content-type-options"] == "nosniff" and r.headers["x-content-type-options"] == "nosniff"
    assert "HttpOnly" in ok.headers["set-cookie"] and "SameSite=strict" in ok.headers["set-cookie"]
    # Named for this server: two review pages on 127.0.0.1 (cookies ignore the port) keep their own tokens.
    name = ok.headers["set-cookie"].split("=", 1)[0]
    assert name.startswith("benchfill_token_") and name != "benchfill_token_"
    with httpx.Client(base_url=base, cookies={"benchfill_token": server.token}) as c:  # another server's name
        assert c.get(f"/item/{CHILD_IDS[0]}").status_code == 403
    # The cookie alone opens pages, but a decision needs the token in a header (CSRF).
    with httpx.Client(base_url=base, cookies={name: server.token}) as c:
        assert c.get(f"/item/{CHILD_IDS[0]}").status_code == 200
        forged = c.post("/api/decision", json={"item_id": CHILD_IDS[0], "reviewer": "x", "decision": "accept"})
        assert forged.status_code == 403
    # A rebinding attack names another host: refused even with the token.
    assert httpx.get(server.url, headers={"Host": "evil.example:80"}).status_code == 403
    with ReviewBoard(server.board.run_dir) as b:
        assert b.decisions() == []


def test_decisions_reach_the_store_at_once(server):
    h = {"X-Benchfill-Token": server.token}
    url = _base(server) + "/api/decision"
    r = httpx.post(url, headers=h, json={"item_id": CHILD_IDS[1], "reviewer": "ann", "decision": "reject"})
    assert r.status_code == 400 and "'reason' is required" in r.json()["error"]
    r = httpx.post(url, headers=h, json={"item_id": CHILD_IDS[1], "reviewer": "ann", "decision": "reject",
                                          "reason": "ambiguous"})  # fmt: skip
    assert r.status_code == 200
    assert httpx.post(url, headers=h, content=b"not json").status_code == 400
    with ReviewBoard(server.board.run_dir) as b:  # a separate connection sees the committed row
        [d] = b.decisions()
        assert (d.item_id, d.reviewer, d.decision, d.reason, d.source) == (CHILD_IDS[1], "ann", "reject", "ambiguous", "page")


def test_item_text_is_shown_escaped(server):
    page = httpx.get(_base(server) + f"/item/{SCRIPT_ID}?token={server.token}")
    assert page.status_code == 200
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page.text
    assert "<script>alert" not in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    assert httpx.get(_base(server) + f"/item/nope?token={server.token}").status_code == 404
    assert '<div class="side">' in page.text and "wrap=" not in page.text  # prose wraps


def test_next_pending_says_none_is_left_only_when_none_is(server):
    base, token = _base(server), server.token
    with httpx.Client(base_url=base, params={"token": token}) as c:
        c.get("/")  # the session cookie
        with ReviewBoard(server.board.run_dir) as b:
            for child in CHILD_IDS[:3]:
                b.decide(child, "ann", "accept")
        # from the one item still pending for ann: it is not "none left"
        r = c.get("/next", params={"after": CHILD_IDS[3], "reviewer": "ann"})
        assert r.status_code == 303 and r.headers["location"] == "/"
        with ReviewBoard(server.board.run_dir) as b:
            b.decide(CHILD_IDS[3], "ann", "accept")
        r = c.get("/next", params={"after": CHILD_IDS[3], "reviewer": "ann"})
        assert r.status_code == 303 and r.headers["location"] == "/?pending=none"


def test_an_items_flags_are_explained_on_its_page(server):
    # a bare "near_duplicate beyond_reach" told a reviewer nothing they could act on
    page = httpx.get(_base(server) + f"/item/{CHILD_IDS[3]}?token={server.token}").text
    assert "flags: <span class='flag' title='its text nearly repeats an item already in the benchmark'>" \
        "near_duplicate</span>" in page
    assert ("<ul id='flags'><li><span class='flag'>near_duplicate</span> its text nearly repeats an item already "
            "in the benchmark</li></ul>") in page
    plain = httpx.get(_base(server) + f"/item/{CHILD_IDS[0]}?token={server.token}").text
    assert "id='flags'" not in plain and "flags:" not in plain


def _global_ipv4() -> list[str]:
    if not shutil.which("ip"):
        return []
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True)
    return [line.split()[3].split("/")[0] for line in out.stdout.splitlines() if len(line.split()) > 3]


def test_listens_on_loopback_only(server):
    assert server.sock.getsockname()[0] == "127.0.0.1"
    for addr in _global_ipv4():  # this machine's other interfaces: nothing listens there
        s = socket.socket()
        s.settimeout(2)
        try:
            with pytest.raises(OSError):
                conftest._real_connect(s, (addr, server.port))
        finally:
            s.close()


def _multiple_choice(run, options_field="options"):
    """The fixture's queue as a multiple-choice benchmark's: ten options, the key a letter; the child's
    options reshuffled and its key moved (what the simulated rewriter does)."""
    import json

    queue = run / "review_queue.jsonl"
    recs = [json.loads(x) for x in queue.read_text().splitlines()]
    for r in recs:
        opts = [f"option {k} of {r['ancestor_id']}" for k in range(10)]
        r["ancestor"] = {**r["ancestor"], "options": opts, "answer": "D"}
        r["child"] = {**r["child"], "options": opts[::-1], "answer": "G"}  # D's text is the 7th now
        r["answer_field"] = "answer"
        if options_field:
            r["options_field"] = options_field
        else:
            r.pop("options_field", None)
    queue.write_text("".join(json.dumps(r) + "\n" for r in recs))


@pytest.mark.parametrize("recorded", ["options", None])  # a queue written before the field was recorded
def test_a_multiple_choice_item_shows_its_options_and_they_can_be_edited(tmp_path, shared_data, recorded):
    # mmlu-pro: the page showed "Reference answer: J" and none of the ten options the key names
    run = make_run(tmp_path, shared_data)
    _multiple_choice(run, recorded)
    with ReviewServer(run) as srv:
        page = httpx.get(_base(srv) + f"/item/{CHILD_IDS[0]}?token={srv.token}").text
        assert '<ol class="options" id="child-options"><li>A. option 9 of' in page
        assert '<li>G. option 3 of' in page and '<ol class="options" id="ancestor-options"><li>A. option 0 of' in page
        assert 'id="edit-options"' in page
        h = {"X-Benchfill-Token": srv.token}
        url = _base(srv) + "/api/decision"
        edit = {"item_id": CHILD_IDS[0], "reviewer": "ann", "decision": "edit"}
        r = httpx.post(url, headers=h, json={**edit, "options": "A. yes\nB. no\nC. maybe"})
        assert r.status_code == 400 and "the answer 'G' names no option (the item has 3)" in r.json()["error"]
        # an option dropped: the letter G would name another option, and the release ship the wrong key
        lines = [x for x in page.split('id="edit-options"')[1].split(">", 1)[1].split("</textarea>")[0].splitlines()
                 if x.strip()]  # fmt: skip
        dropped = "\n".join(x for x in lines if not x.startswith("B. "))
        r = httpx.post(url, headers=h, json={**edit, "options": dropped})
        assert r.status_code == 400 and "names 'option 2 of" in r.json()["error"] and "where it named 'option 3 of" \
            in r.json()["error"] and "give the answer too" in r.json()["error"]
        r = httpx.post(url, headers=h, json={**edit, "options": "\n".join(f"{k}" for k in range(11))})
        assert r.status_code == 400 and "11 options; the multiple-choice grader reads at most 10" in r.json()["error"]
        r = httpx.post(url, headers=h, json={**edit, "options": "A. yes\nB. no\nC. maybe", "answer": "B"})
        assert r.status_code == 200
    with ReviewBoard(run) as b:
        shipped = b.outcomes()[CHILD_IDS[0]].edited_fields
        assert shipped["options"] == ["yes", "no", "maybe"] and shipped["answer"] == "B"


def test_the_sheet_shows_and_takes_options(tmp_path, shared_data):
    import csv

    from benchfill.review import export_queue, import_decisions

    run = make_run(tmp_path, shared_data)
    _multiple_choice(run)
    _, path = export_queue(run)
    rows = list(csv.DictReader(path.open(encoding="utf-8-sig")))
    assert rows[0]["child_options"].splitlines()[6].startswith("G. option 3 of")
    assert rows[0]["ancestor_options"].splitlines()[3].startswith("D. option 3 of")
    rows[0].update(reviewer="bo", decision="edit", edited_options="A. left\nB. right", edited_answer="A")
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert import_decisions(run, path) == 1
    with ReviewBoard(run) as b:
        assert b.outcomes()[CHILD_IDS[0]].edited_fields["options"] == ["left", "right"]


def test_options_of_several_lines_or_under_labels_are_edited_safely(tmp_path, shared_data):
    import json

    run = make_run(tmp_path, shared_data)
    _multiple_choice(run)
    queue = run / "review_queue.jsonl"
    recs = [json.loads(x) for x in queue.read_text().splitlines()]
    recs[0]["child"]["options"][2] = "x = 1\ny = 2"  # a code option of two lines
    recs[1]["child"]["options"] = {"text": ["red", "green", "blue", "grey"], "label": ["1", "2", "3", "4"]}
    recs[1]["child"]["answer"] = "3"
    queue.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with ReviewBoard(run, writable=True) as b:
        with pytest.raises(BenchfillError, match="spans several lines, which an edit of one option a line would split"):
            b.decide(CHILD_IDS[0], "ann", "edit", options="A. a\nB. b")
        with pytest.raises(BenchfillError, match=r"the answer '3' names no option \(the item has 2\)"):
            b.decide(CHILD_IDS[1], "ann", "edit", options="red\nblue")  # labels relettered A, B: '3' names none
        b.decide(CHILD_IDS[1], "ann", "edit", options="red\ngreen\nblue\ngray")  # the key's option kept
        assert b.outcomes()[CHILD_IDS[1]].edited_fields["options"] == {"text": ["red", "green", "blue", "gray"],
                                                                       "label": ["1", "2", "3", "4"]}


def test_an_option_holding_a_vertical_tab_or_a_unicode_line_separator_stays_one_option(tmp_path, shared_data):
    # str.splitlines breaks at \x0b, \x0c, \x85, U+2028 and U+2029 too: MMLU-Pro's "\\vert" was published as
    # \x0b + "ert", such an option became two, and the key the reviewer set named the option after it
    import json

    run = make_run(tmp_path, shared_data)
    _multiple_choice(run)
    queue = run / "review_queue.jsonl"
    recs = [json.loads(x) for x in queue.read_text().splitlines()]
    odd = ["|\x0bert x|", "a\x0cb", "c\x85d", "e\u2028f", "g\u2029h", "i\x1ej", "k", "l", "m"]
    recs[0]["child"]["options"] = odd + ["n"]
    queue.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with ReviewBoard(run, writable=True) as b:
        b.decide(CHILD_IDS[0], "ann", "edit", options="\n".join(odd), answer="D")  # the last option dropped
        assert b.outcomes()[CHILD_IDS[0]].edited_fields["options"] == odd


def test_the_keyed_option_reworded_in_place_and_whitespace_are_no_move(tmp_path, shared_data):
    # The page cannot resend an unchanged answer, so a typo fixed in the right option was refused with "give
    # the answer too" and no way out; options with a trailing space (532 of mmlu-pro's) refused any edit;
    # Enter in the answer box shipped the key "G\n"; a sheet's CRLF line ends alone counted as an edit.
    import json

    run = make_run(tmp_path, shared_data)
    _multiple_choice(run)
    queue = run / "review_queue.jsonl"
    recs = [json.loads(x) for x in queue.read_text().splitlines()]
    recs[1]["child"]["options"] = [o + " " for o in recs[1]["child"]["options"]]
    recs[3]["child"]["problem"] = "First line.\nSecond line."
    queue.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with ReviewBoard(run, writable=True) as b:
        e = b.entry(CHILD_IDS[0])
        lines = e.options(e.child)
        lines[6] = lines[6] + " (fixed)"  # G, the key: reworded where it stands
        b.decide(CHILD_IDS[0], "ann", "edit", options="\n".join(lines))
        assert b.outcomes()[CHILD_IDS[0]].edited_fields["options"][6].endswith("(fixed)")
        e = b.entry(CHILD_IDS[1])
        lines = e.options(e.child)
        lines[0] = "A. a better distractor"
        b.decide(CHILD_IDS[1], "bo", "edit", options="\n".join(lines))
        with pytest.raises(BenchfillError, match="changes neither text, answer nor options"):
            b.decide(CHILD_IDS[2], "cy", "edit", answer="G\n")  # the key G, as it was
        with pytest.raises(BenchfillError, match="changes neither text, answer nor options"):
            b.decide(CHILD_IDS[3], "di", "edit", text="First line.\r\nSecond line.")


def _code_items(run):
    """The fixture's queue as a code benchmark's (HumanEval's fields), the run's spec recorded as such."""
    import json

    from benchfill.store import Store

    prompt = 'def add(a, b):\n    """Return a + b."""\n'
    test = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
    queue = run / "review_queue.jsonl"
    recs = [json.loads(x) for x in queue.read_text().splitlines()]
    for r in recs:
        item = {"prompt": prompt, "canonical_solution": "    return a + b\n", "test": test, "entry_point": "add"}
        r["ancestor"] = {**r["ancestor"], **item}
        r["child"] = {**r["child"], **item, "prompt": prompt.replace("Return", "Give back")}
        r["text_field"], r["answer_field"] = "prompt", "canonical_solution"
    queue.write_text("".join(json.dumps(r) + "\n" for r in recs))
    store = Store(run / "store.db")
    store.set_meta("benchmark", {"name": "aime24", "text_field": "prompt", "answer_field": "canonical_solution",
                                 "tests_field": "test", "entry_point_field": "entry_point", "evaluator": "code"})
    store.close()


def test_a_code_items_tests_are_shown_and_an_edited_solution_must_pass_them(tmp_path, shared_data):
    # A reviewer's edit of a HumanEval solution shipped failing its own tests (or not even parsing), and the
    # page and the sheet never showed the tests the rewriter may have broken.
    import csv

    from benchfill.review import export_queue

    run = make_run(tmp_path, shared_data)
    _code_items(run)
    import threading
    import time

    with ReviewServer(run) as srv:
        page = httpx.get(_base(srv) + f"/item/{CHILD_IDS[0]}?token={srv.token}").text
        assert 'id="child-tests">def check(candidate):' in page and "entry point <code>add</code>" in page
        # a code item's lines are not wrapped (a wrapped line read as a dedented one of its own)
        assert '<div class="side code">' in page and page.count(' wrap="off"') == 2
        # an edit whose tests take a while: another reviewer's page is served meanwhile (it waited for it)
        done: dict[str, float] = {}

        def slow_edit():
            httpx.post(_base(srv) + "/api/decision", headers={"X-Benchfill-Token": srv.token}, timeout=30,
                       json={"item_id": CHILD_IDS[1], "reviewer": "sam", "decision": "edit",
                             "answer": "    import time\n    time.sleep(2)\n    return a + b\n"})  # fmt: skip
            done["edit"] = time.monotonic()

        t = threading.Thread(target=slow_edit)
        t.start()
        time.sleep(0.5)
        assert httpx.get(srv.url).status_code == 200
        done["page"] = time.monotonic()
        t.join(30)
        assert done["page"] < done["edit"]
    with ReviewBoard(run, writable=True) as b:
        assert [d.reviewer for d in b.decisions(CHILD_IDS[1])] == ["sam"]  # it passed, and was recorded
        fails = "as edited, the item's reference solution fails its own tests"
        with pytest.raises(BenchfillError, match=fails):
            b.decide(CHILD_IDS[0], "ann", "edit", answer="    return a - b\n")
        with pytest.raises(BenchfillError, match=fails):
            b.decide(CHILD_IDS[0], "ann", "edit", answer="return a + b\n  x")  # does not parse
        with pytest.raises(BenchfillError, match=fails):  # shipped as written, not read out of prose
            b.decide(CHILD_IDS[0], "ann", "edit", answer="Fixed:\n```python\ndef add(a, b):\n    return a + b\n```\n")
        b.decide(CHILD_IDS[0], "ann", "edit", answer="    return b + a\n")
    _, path = export_queue(run)
    row = next(csv.DictReader(path.open(encoding="utf-8-sig")))
    assert row["child_tests"].startswith("def check(candidate):") and row["ancestor_tests"]
    assert row["child_entry_point"] == row["ancestor_entry_point"] == "add"


@pytest.mark.parametrize("sig, rc, said", [("SIGINT", 130, "benchfill: interrupted"),
                                           ("SIGTERM", 143, "benchfill: terminated")])
def test_the_page_stops_on_a_signal_with_the_status_every_command_gives(tmp_path, shared_data, sig, rc, said):
    # it exited 0 with nothing said, where the README promises 130 after Ctrl-C and 143 after SIGTERM
    import os
    import signal
    import sys

    run = make_run(tmp_path, shared_data)
    proc = subprocess.Popen([sys.executable, "-m", "benchfill", "review", "serve", str(run)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ},
                            preexec_fn=conftest.ctrl_c_as_at_a_terminal)
    try:
        assert proc.stdout.readline().startswith("review page for")
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == rc and err.strip().splitlines()[-1] == said


def test_a_code_items_trailing_spaces_are_an_edit(tmp_path, shared_data):
    # Trailing spaces are no edit for prose; in code they are: a prompt ending in a stray indent does not run,
    # and the reviewer's fix, taking the spaces off, was refused as changing nothing
    import json

    run = make_run(tmp_path, shared_data)
    _code_items(run)
    queue = run / "review_queue.jsonl"
    recs = [json.loads(x) for x in queue.read_text().splitlines()]
    recs[0]["child"]["prompt"] += "    "
    queue.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with ReviewBoard(run, writable=True) as b:
        b.decide(CHILD_IDS[0], "ann", "edit", text=recs[0]["child"]["prompt"].rstrip(" "))
        assert [d.decision for d in b.decisions(CHILD_IDS[0])] == ["edit"]


def test_a_tampered_record_is_shown_escaped_and_a_foreign_token_header_is_refused(server):
    # A run folder from someone else, or a shared store, may hold a queue benchfill did not write: its gap index
    # was put into the page raw (HTML that no CSP stops: a <form> sending input elsewhere), and a probability
    # that is not a number ended the page in a 500.
    entry = next(e for e in server.board.entries if e.item_id == CHILD_IDS[0])
    entry.record.update(gap_index="1<form action='https://evil.example'>", inside_probability="high")
    page = httpx.get(_base(server) + f"/item/{CHILD_IDS[0]}?token={server.token}")
    assert page.status_code == 200 and "<form" not in page.text and "evil.example" not in page.text
    assert "gap &ndash;" in page.text and '<span id="inside-probability">&ndash;</span>' in page.text
    csp = page.headers["content-security-policy"]
    assert "form-action 'self'" in csp and "base-uri 'none'" in csp
    # a token header holding a character outside ASCII: refused as any wrong token, not a server error
    r = httpx.post(_base(server) + f"/api/decision?token={server.token}", headers={"X-Benchfill-Token": "é".encode()},
                   json={"item_id": CHILD_IDS[0], "reviewer": "x", "decision": "accept"})
    assert r.status_code == 403
    # a body nested deeper than the parser goes: refused as any body that is not JSON, not a 500
    r = httpx.post(_base(server) + "/api/decision", headers={"X-Benchfill-Token": server.token},
                   content=("[" * 100_000 + "]" * 100_000).encode())  # (past the 10,000 pymc sets)
    assert r.status_code == 400 and r.json()["error"] == "body is not JSON"


def test_a_bidi_override_is_shown_as_its_code_point_and_each_edit_says_what_it_set(server):
    # "\u202e21" rendered as "12" on the page while 21 shipped; the edit box keeps the characters as they are
    entry = next(e for e in server.board.entries if e.item_id == CHILD_IDS[0])
    entry.child.update({entry.text_field: "What is 5 + 7? \u202eRTL\u202c", entry.answer_field: "\u202e21"})
    page = httpx.get(_base(server) + f"/item/{CHILD_IDS[0]}?token={server.token}").text
    assert '<code class="answer" id="child-answer">[U+202E]21</code>' in page
    assert "[U+202E]RTL[U+202C]" in page and "\u202eRTL" not in page.split("<textarea")[0]
    assert "\u202e21</textarea>" in page  # the edit box: what an edit sends back is what the item holds
    h = {"X-Benchfill-Token": server.token}
    r = httpx.post(_base(server) + "/api/decision", headers=h,
                   json={"item_id": CHILD_IDS[1], "reviewer": "ann", "decision": "edit", "answer": "78"})
    assert r.status_code == 200, r.text
    httpx.post(_base(server) + "/api/decision", headers=h,
               json={"item_id": CHILD_IDS[1], "reviewer": "ann", "decision": "withdraw"})
    page = httpx.get(_base(server) + f"/item/{CHILD_IDS[1]}?token={server.token}").text
    # withdrawn, the edit is in force nowhere, but the page still says what it set
    assert "To be released" not in page and "<summary>what this edit set</summary>" in page and "<pre>78</pre>" in page


def test_an_option_that_begins_like_a_label_keeps_its_word(tmp_path, shared_data):
    run = make_run(tmp_path, shared_data)
    _multiple_choice(run)
    with ReviewBoard(run, writable=True) as b:
        b.decide(CHILD_IDS[0], "ann", "edit", options="Salmonella\nE. coli\nListeria", answer="B")
        assert b.standing(CHILD_IDS[0])["options"] == ["Salmonella", "E. coli", "Listeria"]
        # labelled as the page's box shows them, lines moved and one retyped without its label: each label goes,
        # the option's own "E." stays
        b.decide(CHILD_IDS[0], "bob", "edit", options="C. Listeria\nA. Salmonella\nB. E. coli\nVibrio", answer="C")
        assert b.standing(CHILD_IDS[0])["options"] == ["Listeria", "Salmonella", "E. coli", "Vibrio"]
        # options that all begin like labels, but not the page's (T is no letter of these options): kept whole
        b.decide(CHILD_IDS[0], "cy", "edit", options="T. rex\nE. coli\nH. pylori", answer="B")
        assert b.standing(CHILD_IDS[0])["options"] == ["T. rex", "E. coli", "H. pylori"]


def test_each_edit_says_what_it_changed_of_the_item_as_it_stood(server):
    with ReviewBoard(server.board.run_dir, writable=True) as b:
        b.decide(CHILD_IDS[2], "bob", "edit", text="Bob's wording.", answer="11")
        b.decide(CHILD_IDS[2], "alice", "edit", answer="12", seen=b.version(CHILD_IDS[2]))
    page = httpx.get(_base(server) + f"/item/{CHILD_IDS[2]}?token={server.token}").text
    said = page.split('id="decisions">')[1].split("</ul>")[0]
    bob, alice = said.split("<li>")[1:3]
    assert "Bob&#x27;s wording." in bob and "<pre>11</pre>" in bob
    assert "wording" not in alice and "<pre>12</pre>" in alice  # alice set the answer only
