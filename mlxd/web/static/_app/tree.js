// A conversation's messages form a tree (edits and regenerations add siblings); the screen shows the path from the
// root to `leaf`, and a branch switch moves `leaf` to a sibling's deepest latest descendant.

export function pathTo(conv) {
  const byId = new Map(conv.messages.map((m) => [m.id, m]));
  const path = [];
  let at = byId.get(conv.leaf) || conv.messages[conv.messages.length - 1];
  const seen = new Set();
  while (at && !seen.has(at.id)) {
    seen.add(at.id);
    path.unshift(at);
    at = at.parent ? byId.get(at.parent) : null;
  }
  return path;
}

export function siblingsOf(conv, msg) {
  const list = conv.messages.filter((m) => (m.parent || null) === (msg.parent || null));
  return [list.findIndex((m) => m.id === msg.id), list.length, list];
}

export function deepestFrom(conv, msg) {
  let at = msg;
  for (let guard = 0; guard < conv.messages.length; guard++) {
    const kids = conv.messages.filter((m) => m.parent === at.id);
    if (!kids.length) break;
    at = kids[kids.length - 1];
  }
  return at;
}

// The chat request's messages for a path: text parts plus attachments as content parts.
export function apiMessages(path, systemMessage) {
  const out = systemMessage ? [{ role: "system", content: systemMessage }] : [];
  for (const m of path) {
    if (m.role === "user" && (m.attachments || []).length) {
      const parts = [{ type: "text", text: m.content || "" }];
      for (const a of m.attachments) {
        if (a.kind === "image") parts.push({ type: "image_url", image_url: { url: a.data } });
        if (a.kind === "audio") {
          const [head, data] = String(a.data).split(",", 2);
          parts.push({ type: "input_audio", input_audio: { data, format: head.includes("mp3") || head.includes("mpeg") ? "mp3" : "wav" } });
        }
      }
      out.push({ role: "user", content: parts });
    } else {
      out.push({ role: m.role, content: m.content || "" });
    }
  }
  return out;
}
