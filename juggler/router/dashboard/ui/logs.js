// Logs: the router's and each backend's recent lines (GET /api/v1/logs), filtered on the
// server by source, level and text; new lines are polled for every second while following.
// The logs need the admin key (or, without one on the server, a page on the same
// machine): refused, the page says so and offers to enter the admin key.

import { askKey, getJson } from "./api.js";
import { $, fillSelect, fmtTime, h } from "./dom.js";

const MAX_SHOWN = 2000;
let since = 0;
let timer = null;
let polling = false;

function query() {
  const params = new URLSearchParams({ since: String(since), limit: "1000" });
  const source = $("#logs-source").value;
  const level = $("#logs-level").value;
  const contains = $("#logs-contains").value.trim();
  if (source) params.set("source", source);
  if (level) params.set("level", level);
  if (contains) params.set("contains", contains);
  return `/api/v1/logs?${params}`;
}

function lineNode(line) {
  return h("div", { class: `line l-${line.level}`, dataset: { source: line.source, seq: line.seq } },
    h("span", { class: "t", text: fmtTime(line.time) }),
    h("span", { class: "src", text: line.source }),
    h("span", { class: "lvl", text: line.level }),
    h("span", { class: "msg", text: line.text }));
}

async function poll() {
  if (polling) return;
  polling = true;
  try {
    const answer = await getJson(query(), { admin: true });
    $("#logs-locked").hidden = true;
    const select = $("#logs-source");
    const chosen = select.value;
    fillSelect(select, ["", ...answer.sources.map((s) => s.name)], chosen);
    [...select.options].forEach((o) => { if (!o.value) o.textContent = "all"; });
    const view = $("#logs-view");
    const atBottom = view.scrollTop + view.clientHeight >= view.scrollHeight - 8;
    view.append(...answer.lines.map(lineNode));
    while (view.children.length > MAX_SHOWN) view.firstChild.remove();
    since = answer.next;
    view.dataset.next = String(since);
    if (atBottom) view.scrollTop = view.scrollHeight;
  } catch (err) {
    $("#logs-view").dataset.error = err.message;
    if (err.status === 401 || err.status === 403) locked(err);
  } finally {
    polling = false;
  }
}

function locked(err) {
  stop();
  $("#logs-locked-why").textContent = `The server answered ${err.status}: ${err.message}`;
  $("#logs-locked").hidden = false;
}

function unlock() {
  askKey("The logs need the admin key: backend output may hold other users' prompts.", "admin")
    .then(() => {
      $("#logs-locked").hidden = true;
      restart();
      show();
    })
    .catch(() => {});
}

function restart() {
  since = 0;
  $("#logs-view").replaceChildren();
  poll();
}

export function init() {
  for (const id of ["#logs-source", "#logs-level"]) $(id).addEventListener("change", restart);
  let typing = null;
  $("#logs-contains").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(restart, 300);
  });
  $("#logs-follow").addEventListener("change", (ev) => (ev.target.checked ? show() : stop()));
  $("#logs-admin-key").addEventListener("click", unlock);
}

function stop() {
  clearInterval(timer);
  timer = null;
}

export function show() {
  poll();
  if (!timer && $("#logs-follow").checked) timer = setInterval(poll, 1000);
}

export function hide() {
  stop();
}
