"""The review page in headless Chromium: accept, reject with a reason, edit; then release. And by keyboard.

Uses Debian's chromium and chromedriver (installed by .ci/run); never downloads a browser.
"""

from __future__ import annotations

import json

import pytest
from test_review_support import CHILD_IDS, SCRIPT_ID, make_run

from benchfill.release import release, verify_release
from benchfill.review import ReviewBoard
from benchfill.review.server import ReviewServer

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture
def browser(tmp_path, monkeypatch):
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must not look anything up
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    # No name but the page's own resolves: chromium looked up www.google.com, accounts.google.com and
    # clients2.google.com despite --disable-background-networking (seen with strace, 415 resolver queries)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--dns-prefetch-disable",
                 "--disable-domain-reliability", "--disable-client-side-phishing-detection",
                 "--disable-features=OptimizationHints,MediaRouter,DialMediaRouteProvider,AutofillServerCommunication",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium-profile'}"):  # fmt: skip
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(15)
    yield driver
    driver.quit()


def _heading(driver) -> str | None:
    return driver.execute_script("var h = document.querySelector('h1'); return h && h.textContent;")


def _decide(driver, wait, by, item_id, button, expect, lands_on=None):
    driver.find_element(by.ID, button).click()
    if lands_on:  # an accept or a reject moves on to the reviewer's next pending item; look back at this one
        wait.until(lambda d: _heading(d) == lands_on)
        driver.get(driver.current_url.split("/item/")[0] + f"/item/{item_id}")
    wait.until(lambda d: any(expect in li.text for li in d.find_elements(by.CSS_SELECTOR, "#decisions li")))
    assert driver.find_element(by.TAG_NAME, "h1").text == item_id


def test_review_in_the_browser_then_release(tmp_path, shared_data, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    run = make_run(tmp_path, shared_data)
    _text_a_textarea_would_change(run, CHILD_IDS[3], "\nLine one.\r\nLine two.  \r\n")
    wait = WebDriverWait(browser, 10)
    with ReviewServer(run) as srv:
        browser.get(srv.url)
        rows = browser.find_elements(By.CSS_SELECTOR, "#queue tr td:first-child a")
        assert [a.text for a in rows] == list(CHILD_IDS)
        browser.find_element(By.ID, "reviewer").send_keys("ann")

        rows[0].click()  # accept
        _decide(browser, wait, By, CHILD_IDS[0], "accept", "ann: accept", lands_on=CHILD_IDS[1])

        browser.get(f"http://127.0.0.1:{srv.port}/item/{CHILD_IDS[1]}")  # cookie carries the token
        assert browser.find_element(By.ID, "reviewer").get_attribute("value") == "ann"  # kept in localStorage
        browser.find_element(By.ID, "reject-reason").send_keys("two answers fit")
        _decide(browser, wait, By, CHILD_IDS[1], "reject", "ann: reject – two answers fit",
                lands_on=SCRIPT_ID)  # fmt: skip

        browser.get(f"http://127.0.0.1:{srv.port}/item/{SCRIPT_ID}")
        shown = browser.find_element(By.ID, "child-text").text
        assert shown.startswith("<script>alert('x')</script>")  # shown as text, not run
        assert browser.execute_script("return document.querySelectorAll('main script').length") == 0
        box = browser.find_element(By.ID, "edit-text")
        box.clear()
        box.send_keys("Find the least positive integer n such that n^2 ends in 444.")
        answer = browser.find_element(By.ID, "edit-answer")
        answer.clear()
        answer.send_keys("38")
        _decide(browser, wait, By, SCRIPT_ID, "edit", "ann: edit")
        # the page now shows what a release would ship: the edit, against the proposal
        assert browser.find_element(By.ID, "edited-answer").text == "38"
        kept = browser.execute_script("var c = document.getElementById('edited-text').cloneNode(true);"
                                      "c.querySelectorAll('del').forEach(function (d) { d.remove(); });"
                                      "return c.textContent;")
        assert kept == "Find the least positive integer n such that n^2 ends in 444."  # the edit, diffed

        # an edit of the answer alone leaves the text as it was, byte for byte (a textarea normalizes line
        # ends and a leading newline: sent back untouched, it recorded an edit of the text nobody made)
        browser.get(f"http://127.0.0.1:{srv.port}/item/{CHILD_IDS[3]}")
        answer = browser.find_element(By.ID, "edit-answer")
        answer.clear()
        answer.send_keys("99")
        _decide(browser, wait, By, CHILD_IDS[3], "edit", "ann: edit")
    with ReviewBoard(run) as board:
        [late] = [d for d in board.decisions() if d.item_id == CHILD_IDS[3]]
        child = board.entry(CHILD_IDS[3]).child
        assert json.loads(late.edited_json) == {**child, "answer": _like_answer(child["answer"], "99")}
        late_id = late.id
    with ReviewBoard(run) as board:  # the second edit is not part of what follows
        with board.store.session() as s:
            s.delete(s.get(type(late), late_id))

    with ReviewBoard(run) as board:
        got = [(d.item_id, d.reviewer, d.decision, d.reason) for d in board.decisions()]
        assert got == [(CHILD_IDS[0], "ann", "accept", ""), (CHILD_IDS[1], "ann", "reject", "two answers fit"),
                       (SCRIPT_ID, "ann", "edit", "")]  # fmt: skip
    res = release(run, "1.0.0")
    assert verify_release(res.path) == []
    rows = [json.loads(x) for x in (res.path / "data" / "test.jsonl").read_text().splitlines()]
    generated = {r["id"]: r for r in rows if r["origin"] == "generated"}
    assert set(generated) == {CHILD_IDS[0], SCRIPT_ID}
    edited = generated[SCRIPT_ID]
    assert edited["problem"] == "Find the least positive integer n such that n^2 ends in 444."
    assert edited["answer"] == "38" and edited["edited"] and edited["edited_by"] == "ann"
    assert json.loads(edited["original_fields"])["problem"].startswith("<script>")


def test_review_by_keyboard(tmp_path, shared_data, browser):
    """Single keys decide and move on, but never while typing in a field; Escape leaves a field."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    run = make_run(tmp_path, shared_data)
    wait = WebDriverWait(browser, 10)

    def press(*keys):  # to whatever has focus, as a person would type
        ActionChains(browser).send_keys(*keys).perform()

    def chord(modifier, key):
        ActionChains(browser).key_down(modifier).send_keys(key).key_up(modifier).perform()

    def focused() -> str:
        return browser.execute_script("var a = document.activeElement; return a.id || a.tagName;")

    def on(item_id, said=None):
        wait.until(lambda d: _heading(d) == item_id)
        wait.until(lambda d: focused() == "H1")  # the keys act from the item at once
        if said:
            wait.until(lambda d: d.find_element(By.ID, "status").text == said)

    with ReviewServer(run) as srv:
        browser.get(srv.url)
        assert browser.find_element(By.CSS_SELECTOR, "a.pending").get_attribute("aria-keyshortcuts") == "n"
        browser.find_element(By.ID, "reviewer").click()
        press("kim", Keys.ESCAPE)  # Escape leaves the field, and the name is kept
        assert focused() == "BODY"
        press("n")  # the queue page: the first pending item
        on(CHILD_IDS[0])
        hint = browser.find_element(By.ID, "keys").text
        assert all(k in hint for k in ("a accept", "r reject", "e edit", "n / p next / previous", "Esc"))

        press("a")  # accept, then on to the next pending item
        on(CHILD_IDS[1], f"Recorded: accept on {CHILD_IDS[0]} by kim")
        press("r")  # the reason field; letters typed there are text, not keys
        assert focused() == "reject-reason"
        press("an answer of p or q")
        assert _heading(browser) == CHILD_IDS[1]
        assert browser.find_elements(By.CSS_SELECTOR, "#decisions li") == []
        press(Keys.ENTER)
        on(SCRIPT_ID, f"Recorded: reject on {CHILD_IDS[1]} by kim")

        press("p")  # previous and next, in queue order
        on(CHILD_IDS[1])
        assert "kim: reject – an answer of p or q" in browser.find_element(By.ID, "decisions").text
        press("n")
        on(SCRIPT_ID)
        press("n")
        on(CHILD_IDS[3])

        press("e")  # the edit box: Enter is a new line there, Escape leaves it, Ctrl+Enter saves
        assert focused() == "edit-text"
        chord(Keys.CONTROL, Keys.END)
        press(Keys.ENTER, "n a", Keys.ESCAPE)
        assert focused() == "BODY" and _heading(browser) == CHILD_IDS[3]
        press("e")  # back in, what was typed kept
        chord(Keys.CONTROL, Keys.ENTER)  # an edit shows the item again, as it now stands
        wait.until(lambda d: d.find_elements(By.ID, "edited-text"))
        on(CHILD_IDS[3], f"Recorded: edit on {CHILD_IDS[3]} by kim")
        assert browser.find_element(By.ID, "edited-text").text.endswith("\nn a")

        press("q")  # the queue; "n" finds the one item kim has not decided
        wait.until(lambda d: d.find_elements(By.ID, "queue")
                   and d.execute_script("return document.readyState") == "complete")  # its script has run
        press("n")
        on(SCRIPT_ID)
    with ReviewBoard(run) as board:
        got = [(d.item_id, d.reviewer, d.decision, d.reason) for d in board.decisions()]
    assert got == [(CHILD_IDS[0], "kim", "accept", ""),
                   (CHILD_IDS[1], "kim", "reject", "an answer of p or q"),
                   (CHILD_IDS[3], "kim", "edit", "")]  # fmt: skip


def _like_answer(old, new: str):
    """The answer as the board keeps it: a number stays a number."""
    return type(old)(new) if isinstance(old, (int, float)) and not isinstance(old, bool) else new


def _text_a_textarea_would_change(run, item_id: str, text: str, field: str = "problem") -> None:
    """Give a queued item a text a browser's textarea normalizes (a leading newline, CRLF line ends)."""
    queue = run / "review_queue.jsonl"
    recs = [json.loads(x) for x in queue.read_text().splitlines()]
    for r in recs:
        if r["item_id"] == item_id:
            r["child"][field] = text
    queue.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_a_code_answer_survives_an_edit_of_the_text_and_a_stale_page_is_refused(tmp_path, shared_data, browser):
    # The answer sat in a one-line <input>, which drops line breaks: every edit of the text sent it back
    # flattened (a HumanEval solution released as a SyntaxError). And a page drawn before another reviewer's
    # edit recorded an accept of an item its reviewer never saw.
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    run = make_run(tmp_path, shared_data)
    code = "\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n"
    _text_a_textarea_would_change(run, CHILD_IDS[0], code, field="answer")
    wait = WebDriverWait(browser, 10)
    with ReviewServer(run) as srv:
        browser.get(srv.url)
        browser.find_element(By.ID, "reviewer").send_keys("ann")
        browser.get(f"http://127.0.0.1:{srv.port}/item/{CHILD_IDS[0]}")
        assert browser.find_element(By.ID, "child-answer").tag_name == "pre"  # shown with its lines
        box = browser.find_element(By.ID, "edit-text")
        box.send_keys(" Use recursion.")
        _decide(browser, wait, By, CHILD_IDS[0], "edit", "ann: edit")
        with ReviewBoard(run) as board:
            [edit] = board.decisions(CHILD_IDS[0])
            assert json.loads(edit.edited_json)["answer"] == code  # byte for byte
        # bob's page is drawn; carol edits the item; bob's accept of what he saw is refused
        browser.get(f"http://127.0.0.1:{srv.port}/item/{CHILD_IDS[1]}")
        with ReviewBoard(run) as board:
            board.decide(CHILD_IDS[1], "carol", "edit", text="Carol's wording of the problem.")
        browser.find_element(By.ID, "accept").click()
        wait.until(lambda d: "changed since you opened it" in d.find_element(By.ID, "status").text)
        assert "the edit by carol is now the one in force" in browser.find_element(By.ID, "status").text
        with ReviewBoard(run) as board:
            assert [(d.reviewer, d.decision) for d in board.decisions(CHILD_IDS[1])] == [("carol", "edit")]
        browser.refresh()  # drawn again, it shows carol's edit, and the accept goes through
        _decide(browser, wait, By, CHILD_IDS[1], "accept", "ann: accept", lands_on=CHILD_IDS[2])


def test_leaving_a_page_with_typed_unsaved_text_asks_first(tmp_path, shared_data, browser):
    # a reload, or n / p / q after Esc, emptied a typed reason or edit without a word. (WebDriver accepts a
    # leave-page prompt by itself on navigation, so the page's handler is asked directly.)
    from selenium.webdriver.common.by import By

    ask = ("var ev = new Event('beforeunload', {cancelable: true}); window.dispatchEvent(ev);"
           "return ev.defaultPrevented;")
    run = make_run(tmp_path, shared_data)
    with ReviewServer(run) as srv:
        browser.get(srv.url)
        browser.get(f"http://127.0.0.1:{srv.port}/item/{CHILD_IDS[0]}")
        assert browser.execute_script(ask) is False  # nothing typed: it goes at once
        browser.find_element(By.ID, "reject-reason").send_keys("the answer is ambiguous")
        assert browser.execute_script(ask) is True
        browser.find_element(By.ID, "reject-reason").clear()
        browser.find_element(By.ID, "edit-answer").send_keys("7")
        assert browser.execute_script(ask) is True


def test_an_accept_with_an_unsaved_edit_asks_first(tmp_path, shared_data, browser):
    # "a" after typing an edit (the fieldset reads "Edit and accept") recorded a plain accept and dropped the edit
    import time

    from selenium.webdriver.common.by import By

    run = make_run(tmp_path, shared_data)
    with ReviewServer(run) as srv:
        browser.get(srv.url)
        browser.get(f"http://127.0.0.1:{srv.port}/item/{CHILD_IDS[0]}")
        browser.find_element(By.ID, "reviewer").send_keys("eve")
        browser.find_element(By.ID, "edit-text").send_keys(" EVE'S FIX")
        browser.find_element(By.ID, "accept").click()
        alert = browser.switch_to.alert
        assert "not saved and will be lost" in alert.text
        alert.dismiss()  # kept: nothing recorded, still on the item with the text typed
        time.sleep(0.3)
        assert "EVE'S FIX" in browser.find_element(By.ID, "edit-text").get_attribute("value")
        with ReviewBoard(run) as b:
            assert b.decisions() == []


def test_a_narrow_window_does_not_scroll_sideways(tmp_path, shared_data, browser):
    # at 400 px (a phone, a side pane, 200% zoom) the reason box's size="60" made the item page 536 px wide
    run = make_run(tmp_path, shared_data)
    width = "return document.documentElement.scrollWidth <= window.innerWidth"
    with ReviewServer(run) as srv:
        browser.set_window_size(400, 800)
        browser.get(srv.url)
        assert browser.execute_script(width)  # the queue table scrolls in its own box
        browser.get(f"http://127.0.0.1:{srv.port}/item/{CHILD_IDS[0]}")
        assert browser.execute_script(width)


def test_the_page_for_speech_input_a_phone_and_forced_colours(tmp_path, shared_data, browser):
    """The one-letter keys can be turned off (a dictated "accept" recorded an accept); "e" types on at the end
    of the text; a reject with no reason marks its field; a long failure message never covers the control in
    use at phone width; an insertion is not marked by colour alone; "n" with nothing pending says so."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    run = make_run(tmp_path, shared_data)
    wait = WebDriverWait(browser, 10)

    def press(*keys):
        ActionChains(browser).send_keys(*keys).perform()

    def focused() -> str:
        return browser.execute_script("var a = document.activeElement; return a.id || a.tagName;")

    item = f"/item/{CHILD_IDS[0]}"
    with ReviewServer(run) as srv:
        base = f"http://127.0.0.1:{srv.port}"
        browser.get(srv.url)
        browser.find_element(By.ID, "reviewer").click()
        press("kim", Keys.ENTER)  # Enter keeps the name and leaves the field
        assert focused() == "BODY"
        wait.until(lambda d: d.find_element(By.ID, "status").text == "Reviewing as kim.")
        browser.find_element(By.ID, "keys-on").click()  # off, and kept for the next pages
        browser.get(base + item)
        wait.until(lambda d: focused() == "H1")
        assert not browser.find_element(By.ID, "keys-on").is_selected()
        press("accept")  # as speech input types it
        press("e")
        assert focused() == "H1"
        with ReviewBoard(run) as board:
            assert board.decisions() == []
        browser.find_element(By.ID, "keys-on").click()  # on again
        press("e")  # the caret at the end of the text, where typing goes on
        assert focused() == "edit-text"
        assert browser.execute_script("var t = document.activeElement; return t.selectionStart === t.value.length "
                                      "&& t.selectionEnd === t.value.length;")
        press(Keys.ESCAPE)
        browser.find_element(By.ID, "reject").click()  # no reason: not sent, the field marked and focused
        assert focused() == "reject-reason"
        assert browser.find_element(By.ID, "reject-reason").get_attribute("aria-invalid") == "true"
        assert browser.find_element(By.ID, "reject-reason").get_attribute("required") is not None
        assert browser.find_element(By.CSS_SELECTOR, "label[for='reject-reason']").text == "Reason (required)"
        with ReviewBoard(run) as board:
            assert board.decisions() == []
        # an insertion is underlined: forced colours take its background away
        assert browser.execute_script("return getComputedStyle(document.querySelector('ins')).textDecorationLine") \
            == "underline"

        # at phone width, a long message after a failed save leaves the button in use in view
        browser.set_window_size(390, 844)
        browser.get(base + item)
        wait.until(lambda d: focused() == "H1")
        browser.execute_script("window.fetch = function () { return Promise.reject(new Error('down')); };")
        browser.find_element(By.ID, "edit-text").send_keys(" More.")
        save = browser.find_element(By.ID, "edit")
        browser.execute_script("arguments[0].scrollIntoView({block: 'end'}); arguments[0].focus();", save)
        press(Keys.ENTER)
        wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("Not recorded: the review server"))
        covered = browser.execute_script(
            "var b = document.activeElement.getBoundingClientRect(), s = document.getElementById('status')"
            ".getBoundingClientRect(); return [document.activeElement.id, b.bottom, s.top];")
        assert covered[0] == "edit" and covered[1] <= covered[2], covered

        browser.set_window_size(1280, 900)
        with ReviewBoard(run) as board:  # every item decided by kim: "n" on the queue says none is left
            for child in CHILD_IDS:
                board.decide(child, "kim", "accept")
        browser.get(base + "/")
        wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
        press("n")
        wait.until(lambda d: d.find_elements(By.ID, "none-left"))
        assert "No pending item is left for you" in browser.find_element(By.ID, "none-left").text
