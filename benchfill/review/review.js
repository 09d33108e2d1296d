// Decisions are posted with the session token in a header (never a cookie alone), so another
// site cannot forge one. Messages are set with textContent only: nothing from items is parsed as HTML.
(function () {
  "use strict";
  var token = document.querySelector('meta[name="benchfill-token"]').content;
  var who = document.getElementById("reviewer");
  var status = document.getElementById("status");
  who.value = localStorage.getItem("benchfill-reviewer") || "";
  who.addEventListener("change", function () { localStorage.setItem("benchfill-reviewer", who.value.trim()); });

  function field(id) { var el = document.getElementById(id); return el ? el.value : null; }
  function changed(id) { var el = document.getElementById(id); return el && el.value !== el.defaultValue ? el.value : null; }

  function send(itemId, decision) {
    var reviewer = who.value.trim();
    if (!reviewer) { status.textContent = "Enter your name as reviewer first."; who.focus(); return; }
    localStorage.setItem("benchfill-reviewer", reviewer);
    var body = { item_id: itemId, reviewer: reviewer, decision: decision };
    if (decision === "reject") { body.reason = field("reject-reason"); }
    if (decision === "edit") {
      // Only what the reviewer changed: a textarea normalizes line ends and a leading newline, so sending it
      // untouched would record an edit of the text nobody made.
      body.text = changed("edit-text"); body.answer = changed("edit-answer"); body.reason = field("edit-reason");
    }
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
      if (!res.ok) { status.textContent = "Not recorded: " + res.data.error; return; }
      status.textContent = "Recorded: " + decision + " by " + reviewer;
      location.reload();
    }).catch(function () {
      status.textContent = "Not recorded: the review server cannot be reached (stopped?). What you typed is kept; " +
        "start `benchfill review serve` again and open the URL it prints.";
    });
  }

  document.querySelectorAll("button[data-decision]").forEach(function (b) {
    b.addEventListener("click", function () { send(b.dataset.item, b.dataset.decision); });
  });
})();
