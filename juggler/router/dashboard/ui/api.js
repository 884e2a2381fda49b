// The one place the page talks to the server: JSON calls, SSE streams, the keys.
//
// The API key is asked for once (when the server answers 401) and kept in
// sessionStorage, so it lasts as long as the tab and never leaves this origin. The admin
// key (for what only the admin may see, such as the logs) is kept the same way, apart:
// calls made with `{admin: true}` send it (else the API key) and, refused, throw for
// their page to ask for it, instead of asking for the API key.

const KEY = "juggler.apiKey";
const ADMIN_KEY = "juggler.adminKey";
const SLOTS = {
  api: { title: "API key", key: KEY },
  admin: { title: "Admin key", key: ADMIN_KEY },
};

export class ApiError extends Error {
  constructor(status, message, code = null, param = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.param = param;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY) || "";
}

export function adminKey() {
  return sessionStorage.getItem(ADMIN_KEY) || "";
}

function store(slot, key) {
  if (key) sessionStorage.setItem(SLOTS[slot].key, key);
  else sessionStorage.removeItem(SLOTS[slot].key);
}

export function setApiKey(key) {
  store("api", key);
}

let asking = null;

/**
 * Show the key dialog (once, however many calls wait for it); resolves with the key,
 * kept as the API key, or with slot "admin" as the admin key.
 */
export function askKey(reason, slot = "api") {
  if (asking) return asking;
  const dialog = document.getElementById("key-dialog");
  const form = document.getElementById("key-form");
  const input = document.getElementById("key-input");
  document.getElementById("key-title").textContent = SLOTS[slot].title;
  document.getElementById("key-reason").textContent = reason || "This server needs an API key.";
  dialog.dataset.slot = slot;
  input.value = slot === "admin" ? adminKey() : apiKey();
  asking = new Promise((resolve, reject) => {
    const done = (key) => {
      form.removeEventListener("submit", onSubmit);
      cancel.removeEventListener("click", onCancel);
      dialog.close();
      asking = null;
      if (key === null) reject(new ApiError(401, "an API key is needed"));
      else resolve(key);
    };
    const onSubmit = (ev) => {
      ev.preventDefault();
      store(slot, input.value.trim());
      done(input.value.trim());
    };
    const onCancel = () => done(null);
    const cancel = document.getElementById("key-cancel");
    form.addEventListener("submit", onSubmit);
    cancel.addEventListener("click", onCancel);
    dialog.showModal();
    input.focus();
  });
  return asking;
}

function headers(json, admin) {
  const out = {};
  if (json) out["Content-Type"] = "application/json";
  const key = (admin && adminKey()) || apiKey();
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

async function errorOf(response) {
  let message = `${response.status} ${response.statusText}`;
  let code = null;
  let param = null;
  try {
    const body = await response.json();
    const err = body && body.error;
    if (err && typeof err === "object") {
      message = err.message || message;
      code = err.code || null;
      param = err.param || null;
    } else if (typeof err === "string") {
      message = err;
    }
  } catch {
    /* not JSON: keep the status line */
  }
  return new ApiError(response.status, message, code, param);
}

/**
 * fetch with the key; on 401 asks for the key and tries again. Returns the Response.
 * `admin`: send the admin key (else the API key); a 401 or 403 throws, for the caller
 * to ask for the admin key.
 */
export async function send(method, path, body, signal, { admin = false } = {}) {
  for (let attempt = 0; ; attempt++) {
    const response = await fetch(path, {
      method,
      headers: headers(body !== undefined, admin),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
    if (admin && (response.status === 401 || response.status === 403)) {
      throw await errorOf(response);
    }
    if (response.status === 401 && attempt < 3) {
      const err = await errorOf(response);
      await askKey(apiKey() ? `The key was refused: ${err.message}` : err.message);
      continue;
    }
    if (!response.ok) throw await errorOf(response);
    return response;
  }
}

export async function getJson(path, options = {}) {
  return (await send("GET", path, undefined, undefined, options)).json();
}

export async function postJson(path, body = {}) {
  return (await send("POST", path, body)).json();
}

export async function getText(path) {
  return (await send("GET", path)).text();
}

/**
 * POST and read the answer as server-sent events: yields {event, data} for each event,
 * `data` parsed as JSON when it is JSON ("[DONE]" stays a string). A JSON answer (no
 * stream) is yielded once as {event: "json", data}.
 */
export async function* stream(path, body, signal) {
  const response = await send("POST", path, body, signal);
  const type = response.headers.get("content-type") || "";
  if (!type.includes("text/event-stream")) {
    yield { event: "json", data: await response.json() };
    return;
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const parsed = parseEvent(block);
      if (parsed) yield parsed;
    }
  }
  const last = parseEvent(buffer);
  if (last) yield last;
}

export function parseEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  const text = data.join("\n");
  try {
    return { event, data: JSON.parse(text) };
  } catch {
    return { event, data: text };
  }
}
