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
  // Kept as it is typed, not only on "change": a reviewer who types the name and then opens an item from the
  // address bar or a bookmark never blurs the box, and Chromium 156 fires no change as the page goes.
  function keepName() { localStorage.setItem("benchfill-reviewer", who.value.trim()); }
  who.addEventListener("input", keepName);
  who.addEventListener("change", keepName);
  // One-letter keys can be turned off (WCAG 2.1.4): speech input types words as keystrokes, and a dictated
  // "accept" recorded an accept. The choice is kept for the next pages.
  var keysOn = document.getElementById("keys-on");
  keysOn.checked = localStorage.getItem("benchfill-keys") !== "off";
  keysOn.addEventListener("change", function () { localStorage.setItem("benchfill-keys", keysOn.checked ? "on" : "off"); });

  // A message in the status line, and the control in use kept in view above it (the line is sticky at the
  // bottom: a long message covered the button just pressed on a phone). Set a moment after a page loads, a
  // message is announced by screen readers, which skip a live region's text already there at load.
  var later = null;  // the message of the page before, shown a moment after this one loads
  function say(text) {
    if (later !== null) { clearTimeout(later); later = null; }  // a newer message wins over it
    status.textContent = text;
    var el = document.activeElement;  // a control, not the heading a key was pressed from (no jump to the top)
    if (el && /^(BUTTON|INPUT|TEXTAREA|SELECT)$/.test(el.tagName) && el.scrollIntoView) {
      el.scrollIntoView({ block: "nearest" });
    }
  }

  function field(id) { var el = document.getElementById(id); return el ? el.value : null; }
  function changed(id) { var el = document.getElementById(id); return el && el.value !== el.defaultValue ? el.value : null; }
  function typing(el) {  // a field that takes typed text (a checkbox does not: keys act from it)
    return !!el && (el.isContentEditable || /^(TEXTAREA|SELECT)$/.test(el.tagName) ||
                    (el.tagName === "INPUT" && !/^(checkbox|radio|button|submit|reset)$/.test(el.type)));
  }

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
    if (!reviewer) { who.focus(); say("Enter your name as reviewer first, then press Enter."); return; }
    var reason = document.getElementById("reject-reason");
    if (decision === "reject" && reason && !reason.value.trim()) {
      reason.setAttribute("aria-invalid", "true"); reason.focus(); say("Type a reason to reject."); return;
    }
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
    say("Saving...");
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
      if (!res.ok) { busy = false; say("Not recorded: " + res.data.error); return; }
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
      say("Not recorded: the review server cannot be reached (stopped?). What you typed is kept; " +
          "start `benchfill review serve` again and open the URL it prints.");
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
    if (el === who && ev.key === "Enter") {  // the name is typed: kept, and the keys act again
      ev.preventDefault();
      keepName();
      who.blur();
      say(who.value.trim() ? "Reviewing as " + who.value.trim() + "." : "Enter your name as reviewer first.");
      return;
    }
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
    var target = !keysOn.checked || ev.ctrlKey || ev.metaKey || ev.altKey || ev.repeat ? null : keys[ev.key];
    if (!target) { return; }
    ev.preventDefault();
    if (typing(target)) {
      target.focus();
      if (target.setSelectionRange) { target.setSelectionRange(target.value.length, target.value.length); }  // type on at the end
    } else { target.click(); }
  });
  var reasonField = document.getElementById("reject-reason");
  if (reasonField) { reasonField.addEventListener("input", function () { reasonField.removeAttribute("aria-invalid"); }); }

  var heading = document.querySelector("h1[tabindex]");  // an item page starts at its item, keys ready
  if (heading && (!document.activeElement || document.activeElement === document.body)) { heading.focus(); }
  var recorded = sessionStorage.getItem("benchfill-recorded");
  if (recorded) {
    sessionStorage.removeItem("benchfill-recorded");
    later = setTimeout(function () { later = null; say(recorded); }, 300);
  }
})();
