// The operator console: every call is an existing admin route, with the token in an Authorization header.
// Text from the daemon (values, sources, errors, events) reaches the page through textContent only.

const $ = (id) => document.getElementById(id);
const TOKEN = "mlxd.adminToken";  // sessionStorage: gone when the tab closes
let etag = null;
let config = {};

function token() { return sessionStorage.getItem(TOKEN) || ""; }

async function call(path, { method = "GET", body, headers = {} } = {}) {
  const h = { ...headers };
  if (token()) h["Authorization"] = "Bearer " + token();
  if (body !== undefined) h["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const e = new Error((data.error && data.error.message) || res.statusText);
    e.status = res.status;
    e.code = data.error && data.error.code;
    throw e;
  }
  return data;
}

function showError(e) {
  $("error").hidden = !e;
  $("error").textContent = e ? `${e.status || ""} ${e.code || ""}: ${e.message}`.trim() : "";
}

function cell(tr, text) {
  const td = document.createElement("td");
  td.textContent = text;
  tr.append(td);
  return td;
}

function show(value) { return typeof value === "string" ? value : JSON.stringify(value); }

async function loadStatus() {
  const s = await call("/v1/status");
  etag = s.etag;
  const rows = [["state", s.state], ["generation", s.generation], ["config hash", s.config_hash],
    ["uptime", `${Math.round(s.uptime)} s`], ["pending restart", s.pending_restart.join(", ") || "none"],
    ["last error", s.last_error ? `${s.last_error.trigger}: ${s.last_error.message}` : "none"]];
  $("status").replaceChildren();
  for (const [k, v] of rows) {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = String(v);
    dd.dataset.key = k;
    $("status").append(dt, dd);
  }
  const body = $("models").tBodies[0];
  body.replaceChildren();
  for (const m of s.models) {
    const tr = document.createElement("tr");
    cell(tr, m.name);
    cell(tr, m.state + (m.error ? ` (${m.error})` : ""));
    const td = cell(tr, "");
    for (const action of ["load", "unload"]) {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = action;
      b.addEventListener("click", () => act(() => call(`/v1/models/${encodeURIComponent(m.name)}/${action}`, { method: "POST" })));
      td.append(b);
    }
    body.append(tr);
  }
}

let effects = {};

async function loadConfig() {
  const c = await call("/v1/config");
  if (!Object.keys(effects).length) effects = (await call("/v1/config/effects")).effects;
  config = c.options;
  etag = c.etag;
  drawConfig();
}

function drawConfig() {
  const needle = $("filter").value.trim().toLowerCase();
  const body = $("config").tBodies[0];
  body.replaceChildren();
  for (const [name, o] of Object.entries(config)) {
    const effect = (effects[name] || []).join(", ");
    const text = `${name} ${show(o.value)} ${o.source} ${effect}`.toLowerCase();
    if (needle && !text.includes(needle)) continue;
    const tr = document.createElement("tr");
    tr.dataset.option = name;
    cell(tr, name);
    cell(tr, show(o.value));
    cell(tr, o.source);
    cell(tr, effect);
    body.append(tr);
  }
}

async function loadLora() {
  const l = await call("/v1/lora");
  const box = $("lora");
  box.replaceChildren();
  if (!l.adapters.length) { box.textContent = "no adapters loaded"; return; }
  for (const a of l.adapters) {
    const row = document.createElement("div");
    row.className = "lora";
    const name = document.createElement("span");
    name.textContent = `${a.id}: ${a.path}`;
    const slider = document.createElement("input");
    Object.assign(slider, { type: "range", min: "0", max: "2", step: "0.05", value: String(a.scale) });
    slider.dataset.adapter = String(a.id);
    const value = document.createElement("output");
    value.textContent = a.scale.toFixed(2);
    slider.addEventListener("input", () => { value.textContent = Number(slider.value).toFixed(2); });
    slider.addEventListener("change", () => act(() => call("/v1/lora", { method: "PUT", body: { [a.id]: Number(slider.value) } })));
    row.append(name, slider, value);
    box.append(row);
  }
}

async function loadLogging() {
  const l = await call("/v1/logging");
  const v = l.options["log-verbosity"];
  if (v) $("verbosity").value = v.value;
}

// Load, polled every second: /v1/metrics/summary's counters become the last minute's points, /v1/slots the table.
const SVG = "http://www.w3.org/2000/svg";
const POINTS = 60;
const samples = [];  // {tps, processing, deferred}
let lastSummary = null;

function drawChart(svg, series) {  // series: [[css class, key]]; one y scale from 0 to the largest value shown
  const [w, h] = [600, 90];
  const top = Math.max(1, ...samples.flatMap((p) => series.map(([, key]) => p[key])));
  svg.replaceChildren();
  for (const [cls, key] of series) {
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", cls);
    line.setAttribute("points", samples.map((p, i) =>
      `${(w * (i + POINTS - samples.length)) / (POINTS - 1)},${h - 4 - ((h - 14) * p[key]) / top}`).join(" "));
    svg.append(line);
  }
  const label = document.createElementNS(SVG, "text");
  Object.entries({ x: 4, y: 10 }).forEach(([k, v]) => label.setAttribute(k, v));
  label.textContent = `max ${Number.isInteger(top) ? top : top.toFixed(1)}`;
  svg.append(label);
  svg.dataset.points = String(samples.length);
}

function legend(cls, text) {
  const span = document.createElement("span");
  span.className = cls;
  span.textContent = text + "  ";
  return span;
}

async function pollLoad() {
  const m = await call("/v1/metrics/summary");
  const dt = lastSummary ? m.time - lastSummary.time : 0;
  // Tokens are counted when a generation ends, so a rate is per interval, not per token as it is streamed.
  const tps = dt > 0 ? Math.max(0, m.tokens_predicted_total - lastSummary.tokens_predicted_total) / dt : 0;
  lastSummary = m;
  samples.push({ tps, processing: m.requests_processing, deferred: m.requests_deferred });
  if (samples.length > POINTS) samples.shift();
  drawChart($("chart-tps"), [["tps", "tps"]]);
  drawChart($("chart-requests"), [["processing", "processing"], ["deferred", "deferred"]]);
  $("load-legend").replaceChildren(
    legend("tps", `tokens/s ${tps.toFixed(1)} (total ${m.tokens_predicted_total})`),
    legend("processing", `requests processing ${m.requests_processing}`),
    legend("deferred", `queued ${m.requests_deferred}`),
    legend("", `requests received ${m.requests_total}`));
}

async function loadSlots() {
  const { models } = await call("/v1/slots");
  const body = $("slots").tBodies[0];
  body.replaceChildren();
  for (const [model, slots] of Object.entries(models)) {
    for (const s of slots) {
      const tr = document.createElement("tr");
      tr.dataset.model = model;
      const next = (s.next_token && s.next_token[0]) || {};
      for (const v of [model, s.id, s.n_ctx, s.is_processing ? "processing" : "idle", s.id_task ?? "",
        s.n_prompt_tokens ?? "", next.n_decoded ?? ""]) cell(tr, String(v));
      body.append(tr);
    }
  }
}

let polling = false;
let connected = false;  // polls start once a refresh has been let in: a missing token is not asked every second
async function poll() {
  if (polling || !connected) return;  // a slow answer: skip this tick rather than pile calls up
  polling = true;
  try { await Promise.all([pollLoad(), loadSlots()]); } catch (e) { /* shown by the next refresh */ }
  polling = false;
}

async function refresh() {
  try {
    await Promise.all([loadStatus(), loadConfig(), loadLora(), loadLogging()]);
    connected = true;
    showError(null);
  } catch (e) {
    if (e.status === 401) connected = false;
    showError(e);
  }
}

async function act(fn) {
  try { await fn(); showError(null); } catch (e) { showError(e); }
  await refresh();
}

async function patch(ev) {
  ev.preventDefault();
  const option = $("patch-option").value.trim();
  let value = $("patch-value").value.trim();
  try { value = JSON.parse(value); } catch { /* a bare word is a string */ }
  const result = $("patch-result");
  try {
    const r = await call("/v1/config", { method: "PATCH", body: { [option]: value }, headers: etag ? { "If-Match": `"${etag}"` } : {} });
    result.className = "";
    result.textContent = r.applied ? `applied: generation ${r.generation}, changed ${r.changed.join(", ") || "nothing"}`
      + (r.pending_restart.length ? `; pending restart: ${r.pending_restart.join(", ")}` : "") : "no change";
  } catch (e) {
    result.className = "refused";
    result.textContent = `refused (${e.status} ${e.code}): ${e.message}`;
  }
  await refresh();
}

// /v1/events through fetch (an EventSource cannot send the Authorization header).
let eventsAbort = null;
async function followEvents() {
  if (eventsAbort) eventsAbort.abort();
  eventsAbort = new AbortController();
  try {
    const res = await fetch("/v1/events", { headers: token() ? { Authorization: "Bearer " + token() } : {}, signal: eventsAbort.signal });
    if (!res.ok) return;
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5)).join("\n");
        if (!data) continue;
        const li = document.createElement("li");
        li.textContent = data.trim();
        $("events").prepend(li);
        refresh();
      }
    }
  } catch (e) { /* aborted or the daemon went away */ }
}

function connect(ev) {
  if (ev) ev.preventDefault();
  sessionStorage.setItem(TOKEN, $("token").value.trim());
  $("token").value = "";
  refresh().then(followEvents);
}

$("token-form").addEventListener("submit", connect);
$("patch-form").addEventListener("submit", patch);
$("filter").addEventListener("input", drawConfig);
$("persist").addEventListener("click", () => act(async () => {
  const r = await call("/v1/persist", { method: "POST" });
  $("patch-result").className = "";
  $("patch-result").textContent = "persisted: " + JSON.stringify(r);
}));
$("verbosity-set").addEventListener("click", () => act(() => call("/v1/logging", { method: "PUT", body: { "log-verbosity": Number($("verbosity").value) } })));
refresh().then(() => { if (!$("error").textContent) followEvents(); });
setInterval(poll, 1000);
