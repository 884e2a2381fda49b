// Small DOM helpers. Text from the server is always set as text, never parsed as HTML.

/** h("td", {class: "x", title: "y", dataset: {model: "m"}, on: {click}}, child, ...) */
export function h(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
    else if (key in node && typeof value !== "string") node[key] = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export const $ = (selector, root = document) => root.querySelector(selector);

export function fmtBytes(n) {
  if (typeof n !== "number" || !isFinite(n)) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(n >= 100 || i === 0 ? 0 : 1)} ${units[i]}`;
}

export function fmtAgo(epochSeconds) {
  if (!epochSeconds) return "";
  const s = Math.max(0, Date.now() / 1000 - epochSeconds);
  if (s < 5) return "just now";
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 129600) return `${Math.round(s / 3600)} h ago`;
  return new Date(epochSeconds * 1000).toLocaleString();
}

export function fmtNum(x, digits = 1) {
  if (x === null || x === undefined || !isFinite(x)) return "–";
  return Number(x).toFixed(digits);
}

export function fmtTime(epochSeconds) {
  const d = new Date(epochSeconds * 1000);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** A short message in the corner; kind: "info" | "error" | "ok". */
export function toast(message, kind = "info") {
  const box = document.getElementById("toasts");
  const item = h("div", { class: `toast ${kind}`, role: kind === "error" ? "alert" : "status", text: message });
  box.append(item);
  setTimeout(() => item.remove(), kind === "error" ? 9000 : 4000);
}

/** Fill a <select> with names, keeping the current choice when it is still there. */
export function fillSelect(select, names, preferred) {
  const have = [...select.options].map((o) => o.value);
  if (have.length === names.length && have.every((n, i) => n === names[i])) return;
  const current = select.value || preferred;
  select.replaceChildren(...names.map((n) => h("option", { value: n, text: n })));
  if (names.includes(current)) select.value = current;
}

/** Render a value of unknown shape as compact text (for fields the page has no column for). */
export function describe(value) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}
