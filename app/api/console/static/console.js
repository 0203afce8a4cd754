// The console works without this file: it keeps a slow request from being sent twice, and reloads the
// builds page while a build runs (the page has a reload link too).
"use strict";
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (form.dataset.sent === "1") {
    event.preventDefault();  // a second click while the first post is on its way
    return;
  }
  form.dataset.sent = "1";
  // later, not now: a button disabled before the post is built would drop its own name=value
  window.setTimeout(function () {
    form.querySelectorAll("button[type=submit]").forEach(function (button) { button.disabled = true; });
  }, 0);
});
// a page restored from the back-forward cache must accept posts again
window.addEventListener("pageshow", function () {
  document.querySelectorAll("form").forEach(function (form) {
    delete form.dataset.sent;
    form.querySelectorAll("button[type=submit]").forEach(function (button) { button.disabled = false; });
  });
});
// the builds page while a build runs: reload it so its status shows without a click
var poll = document.querySelector("[data-poll]");
if (poll) {
  window.setTimeout(function () { window.location.reload(); }, parseInt(poll.dataset.poll, 10) || 2000);
}
