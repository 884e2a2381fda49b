// Models: every registered model joined with what /api/v1/health says is loaded.
//
// Columns are a list (COLUMNS): a new health field gets a column by adding one entry,
// and every field, known or not, is shown in the row's details.

import { postJson } from "./api.js";
import { $, describe, fmtAgo, fmtBytes, h, toast } from "./dom.js";

const pending = new Map(); // model name -> what is being done to it
const expanded = new Set();
let last = { catalog: [], health: null };
let refresh = async () => {};

/** Seed 002: "If all slots for that model type are occupied by pinned models, the CLI
 * will output a pre-emptive warning alerting you that loading will fail." */
export function pinnedWarning(model, health) {
  if (!health) return null;
  const limit = (health.max_models || {})[model.type] ?? 1;
  if (limit === -1) return null;
  const same = (health.all_models_loaded || []).filter((e) => e.type === model.type);
  if (same.length < limit || !same.every((e) => e.pinned)) return null;
  if (same.some((e) => e.model_name === model.id)) return null;
  const held = limit === 1 ? `The only ${model.type} slot is held by a pinned model`
    : `All ${limit} ${model.type} slots are held by pinned models`;
  return `${held}: loading this one will fail with slots_pinned_error. ` +
    "Unpin or unload one of them first.";
}

function slotOf(entry, health) {
  if (!entry) return "";
  const same = (health.all_models_loaded || []).filter((e) => e.type === entry.type);
  const limit = (health.max_models || {})[entry.type];
  const of = limit === -1 ? "∞" : limit ?? "?";
  return `${entry.type} ${same.indexOf(entry) + 1} of ${of}`;
}

function statusBadge(model, entry) {
  if (pending.has(model.id)) return h("span", { class: "badge busy", text: pending.get(model.id) });
  if (model.parent) return h("span", { class: "badge off", text: `LoRA adapter of ${model.parent}` });
  if (!entry) {
    const text = model.downloaded === false ? "not downloaded" : "not loaded";
    return h("span", { class: "badge off", text });
  }
  return h("span", { class: `badge s-${entry.status}`, text: entry.status || "loaded" });
}

function activity(entry) {
  if (!entry) return "";
  const parts = [];
  if (entry.is_streaming) parts.push("streaming");
  else if (entry.is_busy) parts.push("busy");
  if (entry.in_flight) parts.push(`${entry.in_flight} in flight`);
  return parts.join(", ") || "idle";
}

/** Issue 21: the model's share of the cores under the compute plan. */
export function computeShare(entry) {
  const c = entry && entry.compute;
  if (!c) return "";
  const cpus = formatCpus(c.cpus || []);
  const text = `${c.threads} thread${c.threads === 1 ? "" : "s"}` + (cpus ? ` on ${cpus}` : "");
  const title = c.planned ? (c.busy ? "busy: its share of the cores" : "idle")
    : "outside the compute plan (explicit threads, or the plan is off)";
  return h("span", { class: "compute", title }, text);
}

function formatCpus(cpus) {
  const runs = [];
  for (const c of cpus) {
    const last = runs[runs.length - 1];
    if (last && last[1] === c - 1) last[1] = c;
    else runs.push([c, c]);
  }
  return runs.map(([a, b]) => (a === b ? `cpu ${a}` : `cpus ${a}-${b}`)).join(", ");
}

function memory(entry) {
  if (!entry || !entry.memory) return "";
  const m = entry.memory;
  const frees = m.downsizable_bytes;
  const parts = [fmtBytes(m.rss_bytes)];
  const layers = entry.gpu_layers || {};
  // Issue 48: each model's VRAM (NVML's per-process figure, else llama.cpp's buffers).
  if (m.vram_bytes) {
    parts.push(`VRAM ${fmtBytes(m.vram_bytes)}` + (layers.of ? ` (${layers.layers}/${layers.of} layers)` : ""));
  }
  const title = [frees ? `a downsize frees ${fmtBytes(frees)}` : "",
    m.downsizable_vram_bytes ? `and ${fmtBytes(m.downsizable_vram_bytes)} of VRAM` : "",
    m.vram_source ? `VRAM from ${m.vram_source}` : ""].filter(Boolean).join("; ");
  return h("span", { title, class: "memory" }, parts.join(" · "));
}

function actions(model, entry, health) {
  if (model.parent) return ""; // an adapter runs on its base model: load that one
  const busy = pending.has(model.id);
  const name = model.id;
  const buttons = [];
  if (!entry) {
    buttons.push(button("Load", busy, () => act(name, "loading…", () =>
      postJson("/api/v1/load", { model_name: name }))));
  } else {
    buttons.push(button(entry.pinned ? "Unpin" : "Pin", busy, () =>
      act(name, entry.pinned ? "unpinning…" : "pinning…", () =>
        postJson("/internal/pin", { model_name: name, pinned: !entry.pinned }),
      `${entry.pinned ? "Unpinned" : "Pinned"} ${name}`)));
    buttons.push(button("Unload", busy, () => act(name, "unloading…", () =>
      postJson("/api/v1/unload", { model_name: name }))));
  }
  const warning = entry ? null : pinnedWarning(model, health);
  return h("div", { class: "actions" }, buttons,
    warning && h("div", { class: "warn pinned-warning", role: "note", text: warning }));
}

function button(label, disabled, onClick) {
  return h("button", { type: "button", class: "small", disabled, dataset: { action: label.toLowerCase() }, on: { click: onClick } }, label);
}

async function act(name, label, fn, done) {
  pending.set(name, label);
  render();
  try {
    const result = await fn();
    toast(result.message || done, "ok");
  } catch (err) {
    toast(`${name}: ${err.message}`, "error");
  } finally {
    pending.delete(name);
    await refresh();
  }
}

const COLUMNS = [
  {
    label: "Model",
    cell: (m) => h("div", {},
      h("button", { type: "button", class: "link", title: "details", on: { click: () => toggle(m.id) } },
        `${expanded.has(m.id) ? "▾" : "▸"} ${m.id}`),
      h("div", { class: "labels" }, (m.labels || []).map((l) => h("span", { class: "chip", text: l })))),
  },
  { label: "Type", cell: (m) => m.type || "" },
  { label: "Recipe", cell: (m) => m.recipe || "" },
  { label: "Status", cell: (m, e) => statusBadge(m, e) },
  { label: "Slot", cell: (m, e, hl) => slotOf(e, hl) },
  { label: "Device", cell: (m, e) => (e ? e.device : "") },
  { label: "Memory", cell: (m, e) => memory(e) },
  { label: "Pinned", cell: (m, e) => (e && e.pinned ? h("span", { class: "badge pin", text: "pinned" }) : "") },
  { label: "Activity", cell: (m, e) => activity(e) },
  { label: "Cores", cell: (m, e) => computeShare(e) },
  { label: "Last use", cell: (m, e) => (e ? fmtAgo(e.last_use) : "") },
  { label: "", cell: (m, e, hl) => actions(m, e, hl) },
];

const MEMORY = COLUMNS.findIndex((c) => c.label === "Memory");
const LAST_USE = COLUMNS.findIndex((c) => c.label === "Last use");

function toggle(name) {
  if (expanded.has(name)) expanded.delete(name);
  else expanded.add(name);
  render();
}

function details(model, entry) {
  const fields = { ...model, ...(entry || {}) };
  return h("dl", { class: "details" },
    Object.entries(fields).flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { text: describe(v) })]));
}

const rowCache = new Map(); // model name -> {sig, rows}

/** Rows are rebuilt only when what they show changed (a button under the pointer stays
 * put); the cells that tick (memory, last use) are refreshed in place. */
function rowsFor(m, e, health) {
  const { memory: _mem, last_use: _used, ...stable } = e || {};
  const sig = JSON.stringify([m, stable, pending.get(m.id), expanded.has(m.id), health.max_models,
    e ? slotOf(e, health) : "", e ? null : pinnedWarning(m, health)]);
  const cached = rowCache.get(m.id);
  if (cached && cached.sig === sig) {
    const cells = cached.rows[0].children;
    cells[MEMORY].replaceChildren(COLUMNS[MEMORY].cell(m, e, health));
    cells[LAST_USE].textContent = COLUMNS[LAST_USE].cell(m, e, health);
    return cached.rows;
  }
  const rows = [h("tr", { dataset: { model: m.id, status: e ? e.status : "unloaded" }, class: e ? "loaded" : "" },
    COLUMNS.map((c) => h("td", {}, c.cell(m, e, health))))];
  if (expanded.has(m.id)) {
    rows.push(h("tr", { class: "detail-row" }, h("td", { colSpan: COLUMNS.length }, details(m, e))));
  }
  rowCache.set(m.id, { sig, rows });
  return rows;
}

export function render() {
  const table = $("#models-table");
  const { catalog, health } = last;
  if (!health) return;
  const head = table.tHead.rows[0];
  if (!head.children.length) head.append(...COLUMNS.map((c) => h("th", { text: c.label })));
  const loaded = new Map((health.all_models_loaded || []).map((e) => [e.model_name, e]));
  const models = [...catalog];
  for (const [name, e] of loaded) {
    if (!models.some((m) => m.id === name)) models.push({ id: name, type: e.type, recipe: e.recipe });
  }
  models.sort((a, b) => Number(loaded.has(b.id)) - Number(loaded.has(a.id)) || a.id.localeCompare(b.id));
  const rows = models.flatMap((m) => rowsFor(m, loaded.get(m.id), health));
  const body = table.tBodies[0];
  if (rows.length !== body.children.length || rows.some((r, i) => body.children[i] !== r)) {
    body.replaceChildren(...rows);
  }
  const limits = Object.entries(health.max_models || {})
    .map(([t, n]) => `${t} ${n === -1 ? "∞" : n}`).join(" · ");
  $("#models-limits").textContent = `slots per type: ${limits}`;
}

/** app.js hands over the latest catalog and health, and how to fetch them again. */
export function update(catalog, health, refetch) {
  last = { catalog, health };
  refresh = refetch;
  render();
}
