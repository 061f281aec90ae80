// agent-bridge board: live updates. Every page works without this script; with it, a page
// reloads itself when anything it may show has changed (a long poll on /live), except while
// you are filling in a form: then a note offers the reload instead.
(function () {
  "use strict";
  var pulse = document.body.getAttribute("data-pulse");
  var dirty = false;
  var leaving = false;
  document.addEventListener("input", function () { dirty = true; });
  // A form being submitted is a navigation already: a reload now would abort it.
  document.addEventListener("submit", function () { leaving = true; });
  function busy() {
    var a = document.activeElement;
    return dirty || (a && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName) && a.type !== "submit");
  }
  function changed() {
    if (leaving) { return; }
    if (busy()) { document.getElementById("live-note").hidden = false; } else { location.reload(); }
  }
  function poll() {
    fetch("/live?since=" + encodeURIComponent(pulse), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error(String(r.status)); } return r.json(); })
      .then(function (j) {
        if (String(j.pulse) !== pulse) { pulse = String(j.pulse); changed(); }
        setTimeout(poll, 250);
      })
      .catch(function () { setTimeout(poll, 5000); });
  }
  if (pulse !== null) { poll(); }
})();
