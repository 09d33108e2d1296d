// Decisions are posted with the session token in a header (never a cookie alone), so another
// site cannot forge one. Messages are set with textContent only: nothing from items is parsed as HTML.
// Keys: an element's aria-keyshortcuts names its key (a button or link is clicked, a text field focused). They act
// only outside text fields, so typing a reason or an edit never triggers one; in a field, Escape leaves it (what was
// typed stays) and Enter (Ctrl+Enter in the textarea) clicks the button its data-submit names.
(function () {
  "use strict";
  var token = document.querySelector('meta[name="benchfill-token"]').content;
  var who = document.getElementById("reviewer");
  var status = document.getElementById("status");
  var busy = false;  // one decision at a time: a key pressed twice must not post twice
  who.value = localStorage.getItem("benchfill-reviewer") || "";
  who.addEventListener("change", function () { localStorage.setItem("benchfill-reviewer", who.value.trim()); });

  function field(id) { var el = document.getElementById(id); return el ? el.value : null; }
  function changed(id) { var el = document.getElementById(id); return el && el.value !== el.defaultValue ? el.value : null; }
  function typing(el) { return !!el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName)); }

  // Typed and not saved: a reload, a key that leaves (n, p, q) or a closed tab asks first
  var leaving = false;
  function unsaved() {
    return !!(field("reject-reason") || field("edit-reason") || changed("edit-text") !== null ||
              changed("edit-answer") !== null || changed("edit-options") !== null);
  }
  window.addEventListener("beforeunload", function (ev) {
    if (!leaving && unsaved()) { ev.preventDefault(); ev.returnValue = ""; }
  });

  function send(itemId, decision, seen) {
    if (busy) { return; }
    var reviewer = who.value.trim();
    if (!reviewer) { status.textContent = "Enter your name as reviewer first."; who.focus(); return; }
    // An accept (or a withdraw) while an edit or a reason is typed and not saved would leave for the next item
    // and drop what was typed ("a" is a likely slip for "Edit and accept"): asked first, as leaving is.
    var typed = (decision !== "edit" && (changed("edit-text") !== null || changed("edit-answer") !== null ||
                 changed("edit-options") !== null || field("edit-reason"))) ||
                (decision !== "reject" && field("reject-reason"));
    if (typed && !window.confirm("What you typed in the edit or reason boxes is not saved and will be lost. " +
                                 "Record " + decision + " anyway?")) { return; }
    localStorage.setItem("benchfill-reviewer", reviewer);
    // seen: the item as this page drew it; one edited since by someone else is refused, not decided unseen
    var body = { item_id: itemId, reviewer: reviewer, decision: decision, seen: seen || null };
    if (decision === "reject") { body.reason = field("reject-reason"); }
    if (decision === "edit") {
      // Only what the reviewer changed: a textarea normalizes line ends and a leading newline, so sending it
      // untouched would record an edit of the text nobody made.
      body.text = changed("edit-text"); body.answer = changed("edit-answer"); body.reason = field("edit-reason");
      body.options = changed("edit-options");  // a multiple-choice item's, where the page shows them
    }
    busy = true;
    status.textContent = "Saving...";
    fetch("/api/decision", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Benchfill-Token": token },
      body: JSON.stringify(body),
      credentials: "same-origin"
    }).then(function (r) {
      return r.text().then(function (text) {
        var data;
        try { data = JSON.parse(text); } catch (e) { data = { error: text || ("HTTP " + r.status) }; }
        return { ok: r.ok, data: data };
      });
    }).then(function (res) {
      if (!res.ok) { busy = false; status.textContent = "Not recorded: " + res.data.error; return; }
      leaving = true;  // saved: what was typed is in the store
      var done = "Recorded: " + decision + " on " + itemId + " by " + reviewer;
      status.textContent = done;
      sessionStorage.setItem("benchfill-recorded", done);  // shown again by the page that loads next
      // An accept or a reject moves on to the reviewer's next pending item (the queue when none is left);
      // an edit or a withdraw shows this item again, as it now stands.
      if (decision === "accept" || decision === "reject") {
        location.href = "/next?after=" + encodeURIComponent(itemId) + "&reviewer=" + encodeURIComponent(reviewer);
      } else {
        location.reload();
      }
    }).catch(function () {
      busy = false;
      status.textContent = "Not recorded: the review server cannot be reached (stopped?). What you typed is kept; " +
        "start `benchfill review serve` again and open the URL it prints.";
    });
  }

  document.querySelectorAll("button[data-decision]").forEach(function (b) {
    b.addEventListener("click", function () { send(b.dataset.item, b.dataset.decision, b.dataset.seen); });
  });
  document.querySelectorAll("a.pending").forEach(function (a) {  // "next pending" is next for this reviewer
    var href = a.getAttribute("href");
    a.addEventListener("click", function () {
      var reviewer = who.value.trim();
      a.href = href + (reviewer ? (href.indexOf("?") < 0 ? "?" : "&") + "reviewer=" + encodeURIComponent(reviewer) : "");
    });
  });

  var keys = {};
  document.querySelectorAll("[aria-keyshortcuts]").forEach(function (el) {
    var key = el.getAttribute("aria-keyshortcuts");
    if (!keys[key]) { keys[key] = el; }
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.defaultPrevented || ev.isComposing) { return; }
    var el = document.activeElement;
    if (typing(el)) {
      if (ev.key === "Escape") {
        ev.preventDefault();
        el.blur();
      } else if (ev.key === "Enter" && el.dataset.submit && (el.tagName !== "TEXTAREA" || ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        document.getElementById(el.dataset.submit).click();
      }
      return;
    }
    var target = ev.ctrlKey || ev.metaKey || ev.altKey || ev.repeat ? null : keys[ev.key];
    if (!target) { return; }
    ev.preventDefault();
    if (typing(target)) { target.focus(); } else { target.click(); }
  });

  var recorded = sessionStorage.getItem("benchfill-recorded");
  if (recorded) { sessionStorage.removeItem("benchfill-recorded"); status.textContent = recorded; }
  var heading = document.querySelector("h1[tabindex]");  // an item page starts at its item, keys ready
  if (heading && (!document.activeElement || document.activeElement === document.body)) { heading.focus(); }
})();
