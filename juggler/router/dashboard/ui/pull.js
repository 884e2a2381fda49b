// Pull: search the catalog (GET /api/v1/models?show_all=true) and pull a model with
// Lemonade's streaming protocol: POST /api/v1/pull {"stream": true} answers with
// `event: progress` (file, file_index, total_files, bytes_downloaded, bytes_total,
// percent), then `event: complete`, or `event: error` ({"error": message}).

import { getJson, stream } from "./api.js";
import { $, fmtBytes, h, toast } from "./dom.js";

let catalog = [];
const running = new Set();
let onPulled = () => {};

async function load() {
  try {
    catalog = (await getJson("/api/v1/models?show_all=true")).data || [];
  } catch (err) {
    toast(`catalog: ${err.message}`, "error");
  }
  render();
}

function matches(m, needle) {
  if (!needle) return true;
  const hay = [m.id, m.checkpoint, m.recipe, ...(m.labels || [])].join(" ").toLowerCase();
  return needle.split(/\s+/).every((w) => hay.includes(w));
}

function render() {
  const needle = $("#pull-search").value.trim().toLowerCase();
  const rows = catalog.filter((m) => matches(m, needle)).map((m) =>
    h("tr", { dataset: { model: m.id } },
      h("td", { text: m.id }),
      h("td", { class: "mono", text: m.checkpoint || "" }),
      h("td", { text: m.recipe || "" }),
      h("td", { text: typeof m.size === "number" ? `${m.size} GB` : "" }),
      h("td", {}, (m.labels || []).map((l) => h("span", { class: "chip", text: l }))),
      h("td", { text: m.downloaded ? "yes" : "no" }),
      h("td", {}, h("button", {
        type: "button", class: "small", disabled: running.has(m.id), dataset: { action: "pull" },
        on: { click: () => pull({ model_name: m.id }) },
      }, m.downloaded ? "Pull again" : "Pull"))));
  $("#pull-table").tBodies[0].replaceChildren(...rows);
}

function progressRow(name) {
  const bar = h("progress", { max: 100, value: 0 });
  const text = h("span", { class: "muted", text: "starting…" });
  const node = h("div", { class: "pull-progress", dataset: { model: name, state: "running" } }, h("b", { text: name }), bar, text);
  $("#pull-progress").prepend(node);
  return { node, bar, text };
}

/** Pull one model, drawing its progress; resolves when the stream ends. */
export async function pull(body) {
  const name = body.model_name;
  running.add(name);
  render();
  const row = progressRow(name);
  const finish = (state, message) => {
    row.node.dataset.state = state;
    row.text.textContent = message;
  };
  try {
    let ended = false;
    for await (const { event, data } of stream("/api/v1/pull", { ...body, stream: true })) {
      if (event === "progress") {
        row.bar.value = Number(data.percent) || 0;
        row.node.dataset.events = String(Number(row.node.dataset.events || 0) + 1);
        const files = data.total_files ? ` (file ${data.file_index} of ${data.total_files})` : "";
        row.text.textContent = `${data.file || ""}${files}: ${fmtBytes(data.bytes_downloaded)} of ${fmtBytes(data.bytes_total)}`;
      } else if (event === "complete") {
        row.bar.value = 100;
        finish("complete", "done");
        ended = true;
      } else if (event === "error" || (data && data.error)) {
        const err = data && data.error;
        throw new Error(typeof err === "string" ? err : (err && err.message) || "pull failed");
      } else if (event === "json") {
        row.bar.value = 100;
        finish("complete", data.message || "done");
        ended = true;
      }
    }
    if (!ended) throw new Error("the stream ended before the pull completed");
    toast(`${name}: pulled`, "ok");
    onPulled();
  } catch (err) {
    finish("error", err.message);
    toast(`${name}: ${err.message}`, "error");
  } finally {
    running.delete(name);
    load();
  }
}

export function init(afterPull) {
  onPulled = afterPull;
  $("#pull-search").addEventListener("input", render);
  $("#pull-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const body = { model_name: $("#pull-name").value.trim() };
    const checkpoint = $("#pull-checkpoint").value.trim();
    const recipe = $("#pull-recipe").value.trim();
    if (checkpoint) body.checkpoint = checkpoint;
    if (recipe) body.recipe = recipe;
    const kind = $("#pull-kind").value; // Lemonade's label flags: embedding, reranking
    if (kind) body[kind] = true;
    if (body.model_name) pull(body);
  });
}

export function show() {
  load();
}

export function hide() {}
