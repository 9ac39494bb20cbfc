// Sampling settings and the system prompt: the server's defaults (/props: default_generation_settings, then
// ui_settings from --webui-config), overridden by what the user saved in this browser. And the model selector.
import { request } from "./api.js";

const SAVED = "mlxd.settings";
const FIELDS = ["systemMessage", "temperature", "top_k", "top_p", "min_p", "max_tokens"];

export function serverDefaults(props) {
  const params = (props.default_generation_settings || {}).params || {};
  const out = { systemMessage: "" };
  for (const f of FIELDS.slice(1)) if (typeof params[f] === "number") out[f] = params[f];
  const ui = props.ui_settings || {};
  for (const f of FIELDS) if (ui[f] !== undefined) out[f] = ui[f];
  return out;
}

export function loadSettings(props) {
  let saved = {};
  try { saved = JSON.parse(localStorage.getItem(SAVED)) || {}; } catch { saved = {}; }
  return { ...serverDefaults(props), ...saved };
}

// The fields a chat request takes (max_tokens -1 means "no limit": left out).
export function requestSettings(s) {
  const out = {};
  for (const f of ["temperature", "top_k", "top_p", "min_p"]) if (typeof s[f] === "number") out[f] = s[f];
  if (typeof s.max_tokens === "number" && s.max_tokens >= 0) out.max_tokens = s.max_tokens;
  return out;
}

export function openSettings(props) {
  const dialog = document.getElementById("settings");
  const form = document.getElementById("settings-form");
  const current = loadSettings(props);
  for (const f of FIELDS) form.elements[f].value = current[f] ?? "";
  dialog.onclose = () => {
    if (dialog.returnValue === "reset") localStorage.removeItem(SAVED);
    if (dialog.returnValue !== "save") return;
    const saved = {};
    for (const f of FIELDS) {
      const raw = form.elements[f].value;
      if (f === "systemMessage") saved[f] = raw;
      else if (raw !== "") saved[f] = Number(raw);
    }
    localStorage.setItem(SAVED, JSON.stringify(saved));
  };
  dialog.showModal();
}

// {props, model}: a single model's /props, or in router mode the chosen (else first loaded) model's, with the
// selector filled from /models and each model's status.
export async function loadModels(chosen) {
  const select = document.getElementById("model");
  const status = document.getElementById("model-status");
  const top = await request("/props");
  if (top.role !== "router") return { props: top, model: null };
  const models = (await request("/models")).data || [];
  const state = (m) => (m.status && m.status.value) || "unknown";
  const model = chosen || (models.find((m) => state(m) === "loaded") || models[0] || {}).id || null;
  select.replaceChildren();
  for (const m of models) {
    const opt = document.createElement("option");
    opt.value = m.id;
    opt.textContent = `${m.id} (${state(m)})`;
    select.append(opt);
  }
  select.hidden = false;
  if (!model) return { props: top, model: null };
  select.value = model;
  status.textContent = "loading " + model + "…";
  const props = await request("/props?model=" + encodeURIComponent(model));
  status.textContent = "";
  for (const opt of select.options) if (opt.value === model) opt.textContent = `${model} (loaded)`;
  return { props, model };
}
