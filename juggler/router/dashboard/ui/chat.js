// Chat playground on the session API: one session per conversation, so turn k prefills
// only turn k (the answer's "cached" figure shows the tokens the backend kept). Also the
// embeddings and rerank forms.

import { ApiError, postJson, send, stream } from "./api.js";
import { $, fillSelect, fmtNum, h, toast } from "./dom.js";

let session = null; // {id, model}
let history = []; // every message so far, to start a new session where the old one ended
let generating = false;

function message(role, text) {
  const body = h("div", { class: "text", text });
  const stats = h("div", { class: "stats" });
  const node = h("div", { class: `msg ${role}`, dataset: { role } }, h("div", { class: "who", text: role }), body, stats);
  $("#chat-log").append(node);
  node.scrollIntoView({ block: "end" });
  return { node, body, stats };
}

function sampling() {
  const out = {};
  const temperature = parseFloat($("#chat-temperature").value);
  const maxTokens = parseInt($("#chat-max-tokens").value, 10);
  if (isFinite(temperature)) out.temperature = temperature;
  if (isFinite(maxTokens)) out.max_new_tokens = maxTokens;
  return out;
}

async function ensureSession(model) {
  if (session && session.model === model) return false;
  await endSession();
  const created = await postJson("/api/v1/sessions", { model });
  session = { id: created.session_id, model };
  $("#chat-session").textContent = `session ${session.id} on ${model}`;
  return true;
}

async function endSession() {
  if (!session) return;
  const id = session.id;
  session = null;
  $("#chat-session").textContent = "";
  try {
    await send("DELETE", `/api/v1/sessions/${encodeURIComponent(id)}`);
  } catch {
    /* already gone with its backend */
  }
}

/** Send the user's turn: only the new messages go to a live session; a new session (first
 * turn, other model, or the old one ended with its backend) gets the whole conversation. */
async function sendInput(model, turn) {
  const isNew = await ensureSession(model);
  const system = $("#chat-system").value.trim();
  const base = history.length === 0 && system ? [{ role: "system", content: system }] : [];
  const messages = isNew ? [...base, ...history, turn] : [...base, turn];
  try {
    await postJson(`/api/v1/sessions/${encodeURIComponent(session.id)}/input`, { messages });
  } catch (err) {
    if (!(err instanceof ApiError) || err.code !== "session_not_found" || isNew) throw err;
    session = null;
    return sendInput(model, turn);
  }
  if (history.length === 0 && system) history.push({ role: "system", content: system });
  history.push(turn);
}

async function ask(text) {
  const model = $("#chat-model").value;
  if (!model) throw new Error("pick a model first");
  message("user", text);
  const answer = message("assistant", "");
  answer.node.classList.add("streaming");
  setGenerating(true);
  const started = performance.now();
  let firstAt = null;
  let content = "";
  let done = null;
  let numChunks = 0;
  try {
    await sendInput(model, { role: "user", content: text });
    const path = `/api/v1/sessions/${encodeURIComponent(session.id)}/generate`;
    for await (const { data } of stream(path, sampling())) {
      if (data === "[DONE]") break;
      if (data && data.error) throw new ApiError(502, data.error.message || String(data.error));
      if (data && typeof data.text === "string") {
        if (firstAt === null) firstAt = performance.now();
        content += data.text;
        numChunks += 1;
        answer.body.textContent = content;
        answer.node.dataset.chunks = String(numChunks);
        answer.node.scrollIntoView({ block: "end" });
      }
      if (data && data.done) done = data;
    }
  } catch (err) {
    answer.node.classList.add("failed");
    answer.stats.textContent = `error: ${err.message}`;
    throw err;
  } finally {
    answer.node.classList.remove("streaming");
    setGenerating(false);
  }
  history.push({ role: "assistant", content });
  answer.node.dataset.done = "true";
  const usage = (done && done.usage) || {};
  const tokens = usage.completion_tokens ?? numChunks;
  const ended = performance.now();
  const genSeconds = firstAt !== null ? (ended - firstAt) / 1000 : 0;
  const tps = genSeconds > 0 && tokens > 1 ? (tokens - 1) / genSeconds : null;
  const parts = [
    `${tokens} tokens`,
    `${fmtNum(tps)} tok/s`,
    `TTFT ${firstAt !== null ? fmtNum(firstAt - started, 0) : "–"} ms`,
    `cached ${usage.prompt_tokens_reused ?? "–"} of ${usage.prompt_tokens ?? "–"} prompt tokens`,
  ];
  if (done && done.finish_reason) parts.push(`finish: ${done.finish_reason}`);
  answer.stats.textContent = parts.join(" · ");
  Object.assign(answer.node.dataset, {
    tokens: String(tokens),
    tps: tps === null ? "" : String(tps),
    cached: String(usage.prompt_tokens_reused ?? ""),
  });
}

function setGenerating(on) {
  generating = on;
  $("#chat-send").disabled = on;
  $("#chat-stop").disabled = !on;
}

async function newChat() {
  await endSession();
  history = [];
  $("#chat-log").replaceChildren();
}

function lines(text) {
  return text.split("\n").map((l) => l.trim()).filter(Boolean);
}

async function embed(ev) {
  ev.preventDefault();
  const out = $("#embed-result");
  out.replaceChildren(h("span", { class: "muted", text: "…" }));
  try {
    const r = await postJson("/api/v1/embeddings", { model: $("#embed-model").value, input: lines($("#embed-input").value) });
    out.replaceChildren(h("table", { class: "grid small" },
      h("tr", {}, ["#", "dims", "norm", "first values"].map((t) => h("th", { text: t }))),
      r.data.map((d) => {
        const v = d.embedding;
        const norm = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
        return h("tr", {}, h("td", { text: d.index }), h("td", { text: v.length }), h("td", { text: fmtNum(norm, 3) }),
          h("td", { text: v.slice(0, 6).map((x) => x.toFixed(4)).join(", ") + (v.length > 6 ? ", …" : "") }));
      })));
  } catch (err) {
    out.replaceChildren(h("span", { class: "error", text: err.message }));
  }
}

async function rerank(ev) {
  ev.preventDefault();
  const out = $("#rerank-result");
  out.replaceChildren(h("span", { class: "muted", text: "…" }));
  const documents = lines($("#rerank-docs").value);
  try {
    const r = await postJson("/api/v1/rerank", { model: $("#rerank-model").value, query: $("#rerank-query").value, documents });
    out.replaceChildren(h("ol", {}, r.results.map((x) =>
      h("li", {}, h("b", { text: fmtNum(x.relevance_score, 4) }), " ", documents[x.index]))));
  } catch (err) {
    out.replaceChildren(h("span", { class: "error", text: err.message }));
  }
}

export function init() {
  $("#chat-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = $("#chat-input");
    const text = input.value.trim();
    if (!text || generating) return;
    input.value = "";
    ask(text).catch((err) => toast(`chat: ${err.message}`, "error"));
  });
  $("#chat-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) {
      ev.preventDefault();
      $("#chat-form").requestSubmit();
    }
  });
  $("#chat-stop").addEventListener("click", () => {
    if (session) postJson(`/api/v1/sessions/${encodeURIComponent(session.id)}/cancel`).catch(() => {});
  });
  $("#chat-new").addEventListener("click", () => newChat());
  $("#chat-model").addEventListener("change", () => newChat());
  $("#embed-form").addEventListener("submit", embed);
  $("#rerank-form").addEventListener("submit", rerank);
}

/** The model pickers: chat models first among the LLMs, the others by their type. */
export function update(catalog, health) {
  const loaded = new Set((health?.all_models_loaded || []).map((e) => e.model_name));
  const byType = (type) => catalog.filter((m) => m.type === type)
    .sort((a, b) => Number(loaded.has(b.id)) - Number(loaded.has(a.id)) || a.id.localeCompare(b.id))
    .map((m) => m.id);
  const firstLoaded = byType("llm").find((n) => loaded.has(n));
  fillSelect($("#chat-model"), byType("llm"), firstLoaded);
  fillSelect($("#embed-model"), byType("embedding"));
  fillSelect($("#rerank-model"), byType("reranking"));
}
