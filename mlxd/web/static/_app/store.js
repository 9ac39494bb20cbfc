// Where conversations live: the server's store (/webui/...), or this browser's localStorage when the server has
// none (--no-webui-store) or it cannot be opened. Both offer the same calls, on plain objects:
//   conversation {id, title, leaf, created, updated, messages: [{id, parent, role, content, ...}]}
import { request } from "./api.js";

export function newId() {
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}

class ServerStore {
  constructor() { this.kind = "server"; }
  list(q) { return request("/webui/conversations" + (q ? "?q=" + encodeURIComponent(q) : "")); }
  get(id) { return request("/webui/conversations/" + id); }
  create(title) { return request("/webui/conversations", { method: "POST", body: { title } }); }
  rename(id, title) { return request("/webui/conversations/" + id, { method: "PATCH", body: { title } }); }
  setLeaf(id, leaf) { return request("/webui/conversations/" + id, { method: "PATCH", body: { leaf } }); }
  remove(id) { return request("/webui/conversations/" + id, { method: "DELETE" }); }
  putMessage(id, msg) {
    const { id: mid, created, ...body } = msg;
    return request(`/webui/conversations/${id}/messages/${mid}`, { method: "PUT", body: { ...body, leaf: true } });
  }
  exportAll() { return request("/webui/export"); }
  importAll(data) { return request("/webui/import", { method: "POST", body: data }); }
}

const LOCAL = "mlxd.conversations";

class LocalStore {
  constructor() { this.kind = "local"; }
  _all() { try { return JSON.parse(localStorage.getItem(LOCAL)) || {}; } catch { return {}; } }
  _save(all) { localStorage.setItem(LOCAL, JSON.stringify(all)); }
  async list(q) {
    const needle = (q || "").toLowerCase();
    return Object.values(this._all())
      .filter((c) => !needle || c.title.toLowerCase().includes(needle)
        || c.messages.some((m) => String(m.content || "").toLowerCase().includes(needle)))
      .sort((a, b) => b.updated - a.updated)
      .map(({ messages, ...summary }) => summary);
  }
  async get(id) {
    const c = this._all()[id];
    if (!c) throw new Error("conversation not found");
    return c;
  }
  async create(title) {
    const all = this._all();
    const now = Date.now() / 1000;
    const c = { id: newId(), title, leaf: null, created: now, updated: now, messages: [] };
    all[c.id] = c;
    this._save(all);
    return c;
  }
  async _change(id, fn) {
    const all = this._all();
    if (!all[id]) throw new Error("conversation not found");
    fn(all[id]);
    all[id].updated = Date.now() / 1000;
    this._save(all);
    return all[id];
  }
  rename(id, title) { return this._change(id, (c) => { c.title = title; }); }
  setLeaf(id, leaf) { return this._change(id, (c) => { c.leaf = leaf; }); }
  async remove(id) { const all = this._all(); delete all[id]; this._save(all); }
  putMessage(id, msg) {
    return this._change(id, (c) => {
      const at = c.messages.findIndex((m) => m.id === msg.id);
      if (at >= 0) c.messages[at] = msg; else c.messages.push(msg);
      c.leaf = msg.id;
    });
  }
  async exportAll() { return { conversations: Object.values(this._all()) }; }
  async importAll(data) {
    const all = this._all();
    const imported = [];
    for (const c of data.conversations || []) {
      const id = newId();
      all[id] = { ...c, id, title: String(c.title || "Imported chat"), messages: c.messages || [], updated: Date.now() / 1000 };
      imported.push(id);
    }
    this._save(all);
    return { imported };
  }
}

// {store, note, error}: the server's store when it serves, else the browser's.
export async function openStore() {
  try {
    const status = await request("/webui/store");
    if (status.enabled && !status.error) {
      const note = status.scoped ? "Conversations are kept on the server, visible to your API key only."
        : "Conversations are kept on the server. It has no API key, so anyone who can reach it can read them.";
      return { store: new ServerStore(), note, error: null };
    }
    const error = status.error ? "Conversations cannot be saved on the server: " + status.error : null;
    return { store: new LocalStore(), note: "Conversations are kept in this browser.", error };
  } catch (e) {
    return { store: new LocalStore(), note: "Conversations are kept in this browser.", error: null };
  }
}
