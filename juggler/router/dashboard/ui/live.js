// Live: the router's /metrics (Prometheus text), scraped every second while this page is
// shown, drawn as small charts: requests running and waiting, tokens/s, time to first
// token and KV-cache use, for all models together and for each model.

import { getText } from "./api.js";
import { $, fmtNum, h } from "./dom.js";

const POINTS = 120;
const INTERVAL_MS = 1000;
const cards = new Map(); // "all" or model name -> card state
let timer = null;
let numScrapes = 0;

/** Prometheus text format 0.0.4 -> [{name, labels, value}]. */
export function parseMetrics(text) {
  const out = [];
  const line = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
  const label = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  for (const raw of text.split("\n")) {
    if (!raw || raw.startsWith("#")) continue;
    const m = line.exec(raw);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || "").matchAll(label)) labels[l[1]] = l[2].replace(/\\(.)/g, "$1");
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

/** One reading per card: the gauges as they are, the counters as running totals. */
export function readings(samples) {
  const all = {};
  const models = new Map();
  const model = (name) => {
    if (!models.has(name)) models.set(name, {});
    return models.get(name);
  };
  const GLOBAL = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv",
    "vllm:generation_tokens_total": "gen",
    "vllm:time_to_first_token_seconds_sum": "ttftSum",
    "vllm:time_to_first_token_seconds_count": "ttftCount",
  };
  const PER_MODEL = {
    "juggler:model_requests_running": "running",
    "juggler:model_requests_waiting": "waiting",
    "juggler:model_kv_cache_usage_perc": "kv",
    "juggler:model_generation_tokens_total": "gen",
    "juggler:model_time_to_first_token_seconds_sum": "ttftSum",
    "juggler:model_time_to_first_token_seconds_count": "ttftCount",
  };
  for (const s of samples) {
    if (s.name in GLOBAL && !Object.keys(s.labels).length) all[GLOBAL[s.name]] = s.value;
    else if (s.name in PER_MODEL && s.labels.model) model(s.labels.model)[PER_MODEL[s.name]] = s.value;
    else if (s.name === "juggler:model_loaded" && s.labels.model) model(s.labels.model);
  }
  return { all, models };
}

function newCard(key, title) {
  const charts = {
    requests: chart(key, "requests", "Requests running / waiting", ["running", "waiting"]),
    tps: chart(key, "tokens_per_s", "Tokens/s", ["tps"]),
    ttft: chart(key, "ttft_ms", "Time to first token (ms)", ["ttft"]),
    kv: chart(key, "kv_pct", "KV cache use (%)", ["kv"], 100),
  };
  const node = h("div", { class: "card", dataset: { model: key } },
    h("h3", { text: title }), h("div", { class: "charts" }, Object.values(charts).map((c) => c.node)));
  return { key, node, charts, prev: null, series: { running: [], waiting: [], tps: [], ttft: [], kv: [] } };
}

function chart(key, name, title, series, fixedMax = null) {
  const canvas = h("canvas", { width: 260, height: 70, dataset: { series: name, model: key, points: "0" } });
  const value = h("span", { class: "value", text: "–" });
  return { node: h("figure", { class: "chart" }, h("figcaption", {}, title, " ", value), canvas), canvas, value, series, fixedMax };
}

function push(list, value) {
  list.push(value);
  if (list.length > POINTS) list.shift();
}

/** Add one reading to a card: rates come from the counters' growth since the last one
 * (a counter that went down is a model loaded again: that interval counts as a gap). */
function record(card, r, t) {
  const prev = card.prev;
  const dt = prev ? (t - prev.t) / 1000 : 0;
  let tps = null;
  let ttft = null;
  if (prev && dt > 0 && r.gen !== undefined && prev.gen !== undefined && r.gen >= prev.gen) {
    tps = (r.gen - prev.gen) / dt;
  }
  if (prev && r.ttftCount > prev.ttftCount && r.ttftSum >= prev.ttftSum) {
    ttft = ((r.ttftSum - prev.ttftSum) / (r.ttftCount - prev.ttftCount)) * 1000;
  }
  push(card.series.running, r.running ?? 0);
  push(card.series.waiting, r.waiting ?? 0);
  push(card.series.tps, tps);
  push(card.series.ttft, ttft);
  push(card.series.kv, r.kv === undefined ? null : r.kv * 100);
  card.prev = { ...r, t };
}

const COLORS = { running: "#2f7de1", waiting: "#e8842c", tps: "#2a9d5c", ttft: "#8a5cd6", kv: "#d6455d" };

function draw(c, card) {
  const canvas = c.canvas;
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 260;
  const height = canvas.clientHeight || 70;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const lists = c.series.map((s) => card.series[s]);
  const values = lists.flat().filter((v) => v !== null && isFinite(v));
  const max = c.fixedMax ?? Math.max(1, ...values) * 1.15;
  ctx.strokeStyle = "rgba(128,128,128,0.25)";
  ctx.beginPath();
  ctx.moveTo(0, height - 0.5);
  ctx.lineTo(width, height - 0.5);
  ctx.stroke();
  c.series.forEach((s, i) => {
    const list = lists[i];
    ctx.strokeStyle = COLORS[s];
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let drawing = false;
    list.forEach((v, j) => {
      if (v === null || !isFinite(v)) { drawing = false; return; }
      const x = width - (list.length - 1 - j) * (width / (POINTS - 1));
      const y = height - 2 - (v / max) * (height - 6);
      if (drawing) ctx.lineTo(x, y);
      else ctx.moveTo(x, y);
      drawing = true;
    });
    ctx.stroke();
    ctx.fillStyle = COLORS[s];
    list.forEach((v, j) => { // a point with no neighbour (TTFT comes per request) as a dot
      const alone = (k) => k < 0 || k >= list.length || list[k] === null;
      if (v === null || !isFinite(v) || !alone(j - 1) || !alone(j + 1)) return;
      const x = width - (list.length - 1 - j) * (width / (POINTS - 1));
      const y = height - 2 - (v / max) * (height - 6);
      ctx.beginPath();
      ctx.arc(Math.min(x, width - 2.5), y, 2.5, 0, 2 * Math.PI);
      ctx.fill();
    });
  });
  const lastOf = (list) => [...list].reverse().find((v) => v !== null && isFinite(v));
  const shown = c.series.map((s) => fmtNum(lastOf(card.series[s]), s === "tps" || s === "ttft" || s === "kv" ? 1 : 0));
  c.value.textContent = shown.join(" / ");
  canvas.dataset.points = String(lists[0].length);
  canvas.dataset.last = String(lastOf(lists[0]) ?? "");
  canvas.dataset.max = String(values.length ? Math.max(...values) : 0);
}

let scraping = false;

async function scrape() {
  if (scraping) return; // a slow answer: skip a beat rather than pile up requests
  scraping = true;
  let text;
  try {
    text = await getText("/metrics");
  } catch (err) {
    $("#live-status").textContent = `metrics: ${err.message}`;
    return;
  } finally {
    scraping = false;
  }
  const t = Date.now();
  const { all, models } = readings(parseMetrics(text));
  const wanted = new Map([["all", ["All models", all]], ...[...models].map(([n, r]) => [n, [n, r]])]);
  for (const [key, [title, r]] of wanted) {
    if (!cards.has(key)) cards.set(key, newCard(key, title));
    record(cards.get(key), r, t);
  }
  for (const key of [...cards.keys()]) if (!wanted.has(key)) cards.delete(key);
  const root = $("#live-cards");
  const nodes = [...cards.values()].map((c) => c.node);
  if (nodes.length !== root.children.length || nodes.some((n, i) => root.children[i] !== n)) {
    root.replaceChildren(...nodes);
  }
  for (const card of cards.values()) for (const c of Object.values(card.charts)) draw(c, card);
  numScrapes += 1;
  root.dataset.scrapes = String(numScrapes);
  $("#live-status").textContent = `· ${models.size} model(s) loaded · updated ${new Date(t).toLocaleTimeString()}`;
}

export function show() {
  if (timer) return;
  scrape();
  timer = setInterval(scrape, INTERVAL_MS);
}

export function hide() {
  clearInterval(timer);
  timer = null;
}
