// The public API as the page uses it: every call carries the API key (asked for on a 401), relative to the page's
// own address so --api-prefix works, and the chat stream parsed from its server-sent events.

const BASE = new URL(".", location.href);
const KEY = "mlxd.apiKey";
let askKey = null;  // set by main.js: () => Promise<string|null>

export function onKeyNeeded(fn) { askKey = fn; }
export function url(path) { return new URL(path.replace(/^\//, ""), BASE).toString(); }

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function headers(extra) {
  const h = { ...extra };
  const key = localStorage.getItem(KEY);
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

export async function request(path, { method = "GET", body, signal, raw = false } = {}) {
  for (let attempt = 0; attempt < 3; attempt++) {
    const init = { method, signal, headers: headers(body !== undefined ? { "Content-Type": "application/json" } : {}) };
    if (body !== undefined) init.body = JSON.stringify(body);
    const res = await fetch(url(path), init);
    if (res.status === 401 && askKey) {
      const key = await askKey();
      if (key) { localStorage.setItem(KEY, key); continue; }
    }
    if (!res.ok) throw new ApiError(res.status, await errorText(res));
    return raw ? res : res.json();
  }
  throw new ApiError(401, "Invalid API Key");
}

async function errorText(res) {
  const text = await res.text();
  try { return JSON.parse(text).error.message || text; } catch { return text || res.statusText; }
}

// POST /v1/chat/completions with stream: true; onDelta(choiceDelta, chunk) per event. Resolves with the last
// chunk that carried timings or usage.
export async function streamChat(body, onDelta, signal) {
  const res = await request("/v1/chat/completions", { method: "POST", body: { ...body, stream: true }, signal, raw: true });
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let final = {};
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return final;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new ApiError(500, chunk.error.message || "stream error");
        if (chunk.timings || chunk.usage) final = { ...final, timings: chunk.timings || final.timings, usage: chunk.usage || final.usage };
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
        if (delta) onDelta(delta, chunk);
      }
    }
  }
  return final;
}
