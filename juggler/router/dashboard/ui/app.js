// The dashboard's entry: tabs (the URL's #hash), the health and catalog polls that the
// Models and Chat pages share, and the header's summary.

import { askKey, getJson } from "./api.js";
import * as chat from "./chat.js";
import { $, fmtBytes, toast } from "./dom.js";
import * as live from "./live.js";
import * as logs from "./logs.js";
import * as models from "./models.js";
import * as pull from "./pull.js";

const PAGES = {
  models: { show: () => poll(), hide() {} },
  live,
  chat: { show() {}, hide() {} },
  logs,
  pull,
};
const HEALTH_MS = 1500;
const CATALOG_MS = 15000;

let current = null;
let catalog = [];
let catalogAt = 0;
let health = null;
let polling = false;

async function poll(forceCatalog = false) {
  if (polling) return;
  polling = true;
  try {
    if (forceCatalog || Date.now() - catalogAt > CATALOG_MS) {
      catalog = (await getJson("/api/v1/models")).data || [];
      catalogAt = Date.now();
    }
    health = await getJson("/api/v1/health");
    document.body.dataset.connected = "true";
    models.update(catalog, health, () => poll(true));
    chat.update(catalog, health);
    summary();
  } catch (err) {
    document.body.dataset.connected = "false";
    $("#summary").textContent = `not connected: ${err.message}`;
  } finally {
    polling = false;
  }
}

function summary() {
  const loaded = health.all_models_loaded || [];
  const busy = loaded.filter((e) => e.is_busy).length;
  const parts = [`v${health.version}`, `${loaded.length} loaded`, `${busy} busy`];
  const mem = health.memory;
  const sources = (mem && mem.sources) || [];
  for (const s of sources) {
    if (s.total_bytes) parts.push(`${s.memory === "gpu" ? "VRAM" : "memory"} ${fmtBytes(s.used_bytes)} of ${fmtBytes(s.total_bytes)} (${s.name})`);
  }
  if (!sources.some((s) => s.total_bytes) && mem && mem.total_bytes) parts.push(`memory ${fmtBytes(mem.used_bytes)} of ${fmtBytes(mem.total_bytes)} (${mem.source})`);
  const restarting = (health.watchdog && health.watchdog.restarting) || [];
  if (restarting.length) parts.push(`restarting: ${restarting.map((r) => r.model_name).join(", ")}`);
  $("#summary").textContent = parts.join(" · ");
}

function route() {
  const name = (location.hash || "#models").slice(1);
  const next = PAGES[name] ? name : "models";
  if (current && current !== next) PAGES[current].hide();
  for (const section of document.querySelectorAll("section.tab")) section.hidden = section.id !== `tab-${next}`;
  for (const link of document.querySelectorAll("#tabs a")) link.classList.toggle("active", link.dataset.tab === next);
  current = next;
  document.body.dataset.tab = next;
  PAGES[next].show();
}

function start() {
  chat.init();
  logs.init();
  pull.init(() => poll(true));
  $("#key-button").addEventListener("click", () => askKey("Set the API key for this tab.").then(() => poll(true)).catch(() => {}));
  window.addEventListener("hashchange", route);
  window.addEventListener("unhandledrejection", (ev) => {
    toast(String(ev.reason && ev.reason.message ? ev.reason.message : ev.reason), "error");
  });
  route();
  poll(true);
  setInterval(poll, HEALTH_MS);
}

start();
