// The chat page: wires the sidebar, the message list, the composer, settings, models and the API key dialog.
import { ApiError, onKeyNeeded, request, streamChat } from "./api.js";
import { editInPlace, messageElement, streamInto } from "./render.js";
import { loadModels, loadSettings, openSettings, requestSettings } from "./settings.js";
import { newId, openStore } from "./store.js";
import { apiMessages, deepestFrom, pathTo, siblingsOf } from "./tree.js";

const $ = (id) => document.getElementById(id);
const ui = { store: null, conv: null, abort: null, attachments: [], props: {}, model: null };

function banner(text) {
  $("banner").hidden = !text;
  $("banner").textContent = text || "";
}

function storeFailed(e) {
  banner("The conversation could not be saved: " + e.message + "\nChat goes on; this conversation is kept on this page only.");
}

// -- key dialog ---------------------------------------------------------------------------------------------------
onKeyNeeded(() => new Promise((resolve) => {
  const dialog = $("key-dialog");
  $("key-input").value = "";
  dialog.onclose = () => resolve(dialog.returnValue === "ok" ? $("key-input").value.trim() : null);
  dialog.showModal();
}));

// -- sidebar ------------------------------------------------------------------------------------------------------
async function refreshList() {
  let items = [];
  try { items = await ui.store.list($("search").value.trim()); } catch (e) { storeFailed(e); }
  const list = $("conversations");
  list.replaceChildren();
  for (const c of items) {
    const li = document.createElement("li");
    li.dataset.id = c.id;
    if (ui.conv && ui.conv.id === c.id) li.className = "active";
    const title = document.createElement("span");
    title.className = "title";
    title.textContent = c.title;
    title.title = c.title;
    li.append(title, smallButton("Rename", () => rename(c)), smallButton("Delete", () => remove(c)));
    li.addEventListener("click", () => openConversation(c.id));
    list.append(li);
  }
}

function smallButton(label, fn) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.className = label.toLowerCase();
  b.addEventListener("click", (ev) => { ev.stopPropagation(); fn(); });
  return b;
}

async function rename(c) {
  const title = prompt("Rename conversation", c.title);
  if (title === null || !title.trim()) return;
  try { await ui.store.rename(c.id, title.trim()); } catch (e) { storeFailed(e); }
  if (ui.conv && ui.conv.id === c.id) ui.conv.title = title.trim();
  refreshList();
}

async function remove(c) {
  if (!confirm("Delete this conversation?")) return;
  try { await ui.store.remove(c.id); } catch (e) { storeFailed(e); }
  if (ui.conv && ui.conv.id === c.id) newChat();
  refreshList();
}

async function openConversation(id) {
  if (ui.abort) return;
  try {
    ui.conv = await ui.store.get(id);
    banner("");
  } catch (e) { storeFailed(e); return; }
  draw();
  refreshList();
}

function newChat() {
  ui.conv = null;
  draw();
  refreshList();
}

// -- messages -----------------------------------------------------------------------------------------------------
const actions = {
  edit: async (msg) => {
    if (ui.abort) return;
    const box = document.querySelector(`.msg[data-id="${msg.id}"]`);
    const text = await editInPlace(box, msg.content || "");
    if (text === null || !text.trim()) { draw(); return; }
    const user = { id: newId(), parent: msg.parent || null, role: "user", content: text, attachments: msg.attachments || [] };
    await addMessage(user);
    await generate(user);
  },
  regenerate: async (msg) => {
    if (ui.abort) return;
    const parent = ui.conv.messages.find((m) => m.id === msg.parent);
    if (parent) await generate(parent);
  },
  branch: async (msg, step) => {
    if (ui.abort) return;
    const [at, count, list] = siblingsOf(ui.conv, msg);
    const next = list[(at + step + count) % count];
    ui.conv.leaf = deepestFrom(ui.conv, next).id;
    try { if (ui.store) await ui.store.setLeaf(ui.conv.id, ui.conv.leaf); } catch (e) { storeFailed(e); }
    draw();
  },
};

function draw() {
  const list = $("messages");
  list.replaceChildren();
  if (!ui.conv) return;
  for (const m of pathTo(ui.conv)) list.append(messageElement(m, actions, siblingsOf(ui.conv, m)));
  list.scrollTop = list.scrollHeight;
}

async function ensureConversation(title) {
  if (ui.conv) return;
  try {
    ui.conv = { ...(await ui.store.create(title.slice(0, 60) || "New chat")), messages: [] };
  } catch (e) {
    storeFailed(e);
    ui.conv = { id: newId(), title, leaf: null, messages: [], unsaved: true };
  }
  refreshList();
}

async function addMessage(msg) {
  const at = ui.conv.messages.findIndex((m) => m.id === msg.id);
  if (at >= 0) ui.conv.messages[at] = msg; else ui.conv.messages.push(msg);
  ui.conv.leaf = msg.id;
  if (ui.conv.unsaved) return;
  try { await ui.store.putMessage(ui.conv.id, msg); } catch (e) { storeFailed(e); }
}

// Stream an answer to `parent` (a user message) as a new assistant message; the screen is redrawn at most once a
// frame, so a fast stream costs one markdown render per frame, not one per token.
async function generate(parent) {
  ui.conv.leaf = parent.id;
  const answer = { id: newId(), parent: parent.id, role: "assistant", content: "", reasoning: "", tool_calls: [] };
  ui.conv.messages.push(answer);
  ui.conv.leaf = answer.id;
  draw();
  const box = document.querySelector(`.msg[data-id="${answer.id}"]`);
  let queued = false;
  const paint = () => {
    queued = false;
    streamInto(box, answer);
    const list = $("messages");
    list.scrollTop = list.scrollHeight;
  };
  ui.abort = new AbortController();
  setBusy(true);
  const settings = loadSettings(ui.props);
  const body = { messages: apiMessages(pathTo(ui.conv).slice(0, -1), settings.systemMessage),
    ...requestSettings(settings), timings_per_token: false };
  if (ui.model) body.model = ui.model;
  try {
    const final = await streamChat(body, (delta) => {
      if (delta.content) answer.content += delta.content;
      if (delta.reasoning_content) answer.reasoning += delta.reasoning_content;
      for (const call of delta.tool_calls || []) {
        const slot = answer.tool_calls[call.index || 0] ||= { name: "", arguments: "" };
        if (call.function && call.function.name) slot.name += call.function.name;
        if (call.function && call.function.arguments) slot.arguments += call.function.arguments;
      }
      if (!queued) { queued = true; requestAnimationFrame(paint); }
    }, ui.abort.signal);
    answer.timings = final.timings;
  } catch (e) {
    if (e.name === "AbortError") answer.stopped = true;
    else answer.error = e instanceof ApiError ? e.message : String(e);
  } finally {
    ui.abort = null;
    setBusy(false);
  }
  if (ui.model) answer.model = ui.model;
  await addMessage(answer);
  draw();
  refreshList();
}

function setBusy(busy) {
  $("stop").hidden = !busy;
  $("send").disabled = busy;
}

async function send(ev) {
  ev.preventDefault();
  const text = $("input").value;
  if (ui.abort || (!text.trim() && !ui.attachments.length)) return;
  $("input").value = "";
  await ensureConversation(text.trim());
  const path = pathTo(ui.conv);
  const last = path[path.length - 1];
  const user = { id: newId(), parent: last ? last.id : null, role: "user", content: text, attachments: ui.attachments };
  ui.attachments = [];
  $("attachments").replaceChildren();
  await addMessage(user);
  await generate(user);
}

// -- attachments --------------------------------------------------------------------------------------------------
function readAsDataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function attach() {
  for (const file of $("attach").files) {
    const kind = file.type.startsWith("image/") ? "image" : file.type.startsWith("audio/") ? "audio" : null;
    if (!kind) continue;
    ui.attachments.push({ kind, name: file.name, data: await readAsDataUrl(file) });
    const tag = document.createElement("span");
    tag.textContent = file.name;
    $("attachments").append(tag);
  }
  $("attach").value = "";
}

function showModalities(props) {
  const m = props.modalities || {};
  const accept = [m.vision ? "image/*" : "", m.audio ? "audio/*" : ""].filter(Boolean);
  $("attach-label").hidden = !accept.length;
  $("attach").accept = accept.join(",");
}

// -- import / export ----------------------------------------------------------------------------------------------
async function exportAll() {
  try {
    const data = await ui.store.exportAll();
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([JSON.stringify(data, null, 1)], { type: "application/json" }));
    a.download = "mlxd-conversations.json";
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  } catch (e) { storeFailed(e); }
}

async function importFile() {
  const file = $("import").files[0];
  $("import").value = "";
  if (!file) return;
  try {
    const result = await ui.store.importAll(JSON.parse(await file.text()));
    banner("");
    await refreshList();
    if (result.imported && result.imported.length) openConversation(result.imported[0]);
  } catch (e) { banner("Import failed: " + e.message); }
}

// -- start --------------------------------------------------------------------------------------------------------
async function selectModel(name) {
  ui.model = name || null;
  const found = await loadModels(ui.model);
  ui.props = found.props;
  showModalities(ui.props);
}

async function start() {
  $("composer").addEventListener("submit", send);
  $("input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) send(ev);
  });
  $("stop").addEventListener("click", () => ui.abort && ui.abort.abort());
  $("new-chat").addEventListener("click", newChat);
  $("search").addEventListener("input", refreshList);
  $("attach").addEventListener("change", attach);
  $("export").addEventListener("click", exportAll);
  $("import").addEventListener("change", importFile);
  $("settings-open").addEventListener("click", () => openSettings(ui.props));
  $("model").addEventListener("change", () => selectModel($("model").value).catch((e) => banner(e.message)));
  try {
    const found = await loadModels(null);
    ui.props = found.props;
    ui.model = found.model;
    showModalities(ui.props);
  } catch (e) { banner("The server could not be reached: " + e.message); }
  const opened = await openStore();
  ui.store = opened.store;
  $("store-note").textContent = opened.note;
  if (opened.error) banner(opened.error);
  document.body.dataset.ready = "true";
  await refreshList();
}

start();
