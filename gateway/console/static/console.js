// chinwag console: rename, delete (confirmed), local times and the status page's refresh.
// Loaded from the console's own origin (the CSP allows no inline script). Mutations go to the JSON
// API with fetch(); the browser adds the Origin header the server checks (no CSRF token needed).
"use strict";

function byId(id) { return document.getElementById(id); }

function say(text, bad) {
  const line = byId("action-status");
  if (line) { line.textContent = text; line.className = "status-line" + (bad ? " error" : ""); }
}

async function api(method, url, body) {
  const options = { method: method, headers: { "Accept": "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(url, options);
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) { throw new Error((data && data.error) || ("HTTP " + response.status)); }
  return data;
}

// the page's texts in its language, rendered by the server onto #action-status (data-*)
function text(name) { return byId("action-status").dataset[name]; }

function setupSession() {
  const form = byId("rename");
  if (!form) { return; }
  const id = form.dataset.session;
  const url = "/api/v1/sessions/" + encodeURIComponent(id);
  form.addEventListener("submit", async function (event) {
    event.preventDefault();
    const title = form.elements.title.value.trim();
    try {
      const data = await api("PATCH", url, { title: title || null });
      const heading = byId("session-title");
      heading.textContent = data.session.title || text("untitled");
      heading.classList.toggle("untitled", !data.session.title);
      document.title = (data.session.title || id) + " · chinwag console";
      say(data.session.title ? text("renamed") : text("cleared"));
    } catch (error) { say(text("renameFailed").replace("{reason}", error.message), true); }
  });
  const panel = byId("confirm-delete");
  byId("delete").addEventListener("click", function () { panel.hidden = false; byId("delete-confirm").focus(); });
  byId("delete-cancel").addEventListener("click", function () { panel.hidden = true; });
  byId("delete-confirm").addEventListener("click", async function () {
    try {
      await api("DELETE", url);
      window.location.assign("/console/?deleted=" + encodeURIComponent(id));
    } catch (error) { say(text("deleteFailed").replace("{reason}", error.message), true); }
  });
}

function localTimes(root) {
  root.querySelectorAll("time[datetime]").forEach(function (node) {
    const when = new Date(node.getAttribute("datetime"));
    if (!isNaN(when)) { node.title = node.textContent + " UTC"; node.textContent = when.toLocaleString(); }
  });
}

function setupStatus() {
  const live = byId("live");
  if (!live) { return; }
  setInterval(async function () {
    try {
      const response = await fetch(live.dataset.refresh, { credentials: "same-origin" });
      if (!response.ok) { return; }
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("live");
      if (fresh) { live.replaceChildren(...fresh.childNodes); localTimes(live); }
    } catch (e) { /* the next tick tries again */ }
  }, 10000);
}

document.addEventListener("DOMContentLoaded", function () {
  setupSession();
  setupStatus();
  localTimes(document);
});
