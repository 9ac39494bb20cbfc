// One message on screen. All of a message's text (content, reasoning, tool calls, attachment names) is untrusted
// and reaches the DOM only through markdown.js or textContent.
import { renderMarkdown } from "./markdown.js";

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function button(label, onClick) {
  const b = el("button", "", label);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

// actions: {edit(msg), regenerate(msg), branch(msg, step)}; siblings: [index, count] among its parent's children.
export function messageElement(msg, actions, siblings) {
  const box = el("div", "msg " + msg.role);
  box.dataset.id = msg.id;
  box.append(el("div", "parts"), el("div", "content"), el("div", "meta"));
  fillMessage(box, msg, actions, siblings);
  return box;
}

export function fillMessage(box, msg, actions, siblings) {
  box._stream = null;
  fillParts(box.querySelector(".parts"), msg);
  const content = box.querySelector(".content");
  content.replaceChildren(renderMarkdown(msg.content || ""));
  if (msg.error) content.append(el("p", "error", "Error: " + msg.error));
  fillMeta(box.querySelector(".meta"), msg, actions, siblings);
}

function fillParts(parts, msg) {
  parts.replaceChildren();
  for (const a of msg.attachments || []) parts.append(attachmentElement(a));
  if (msg.reasoning) {
    const d = el("details", "reasoning");
    d.append(el("summary", "", "Reasoning"), el("div", "reasoning-text", msg.reasoning));
    parts.append(d);
  }
  for (const call of msg.tool_calls || []) {
    const d = el("details", "tool");
    d.open = true;
    d.append(el("summary", "", "Tool call: " + (call.name || "")), el("pre", "", call.arguments || ""));
    parts.append(d);
  }
}

// While an answer streams: blocks that have ended (up to the last blank line outside a code fence) are rendered
// once and kept; only the open block at the end is rendered again, so a long answer costs the same per frame as a
// short one. The result is the same as rendering the whole text, whose blocks also split at blank lines.
export function streamInto(box, msg) {
  const content = box.querySelector(".content");
  if (!box._stream) {
    box._stream = { done: 0, closed: el("div", "closed"), open: el("div", "open") };
    content.replaceChildren(box._stream.closed, box._stream.open);
  }
  const state = box._stream;
  const text = msg.content || "";
  const cut = lastBlockEnd(text, state.done);
  if (cut > state.done) {
    state.closed.append(renderMarkdown(text.slice(state.done, cut)));
    state.done = cut;
  }
  state.open.replaceChildren(renderMarkdown(text.slice(state.done)));
  if (msg.reasoning || (msg.tool_calls || []).length) {
    const parts = box.querySelector(".parts");
    const opened = parts.querySelector("details.reasoning")?.open;  // a reader who opened it keeps it open
    fillParts(parts, msg);
    if (opened) parts.querySelector("details.reasoning").open = true;
  }
}

function lastBlockEnd(text, from) {
  let fences = 0;
  let cut = from;
  const re = /^[ \t]*(```|~~~)|\n\n/gm;
  re.lastIndex = from;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    if (m[1]) fences++;
    else if (fences % 2 === 0) cut = m.index + 2;
  }
  return cut;
}

function fillMeta(meta, msg, actions, siblings) {
  meta.replaceChildren();
  if (!actions) return;
  if (siblings && siblings[1] > 1) {
    meta.append(button("‹", () => actions.branch(msg, -1)), el("span", "branch", `${siblings[0] + 1}/${siblings[1]}`),
      button("›", () => actions.branch(msg, 1)));
  }
  if (msg.role === "user") meta.append(button("Edit", () => actions.edit(msg)));
  if (msg.role === "assistant") {
    meta.append(button("Regenerate", () => actions.regenerate(msg)));
    const t = msg.timings;
    if (t && t.predicted_n !== undefined) {
      const speed = t.predicted_per_second ? `, ${t.predicted_per_second.toFixed(1)} tokens/s` : "";
      meta.append(el("span", "timings", `${t.prompt_n ?? 0} prompt tokens, ${t.predicted_n} tokens${speed}`));
    }
    if (msg.stopped) meta.append(el("span", "stopped", "stopped"));
  }
}

function attachmentElement(a) {
  const data = String(a.data || "");
  if (a.kind === "image" && data.startsWith("data:image/")) {
    const img = el("img", "attachment");
    img.alt = String(a.name || "image");
    img.src = data;
    return img;
  }
  if (a.kind === "audio" && data.startsWith("data:audio/")) {
    const audio = el("audio");
    audio.controls = true;
    audio.src = data;
    return audio;
  }
  return el("span", "attachment-name", String(a.name || "attachment"));
}

// An inline editor in place of a user message's content: resolves with the new text, or null.
export function editInPlace(box, text) {
  return new Promise((resolve) => {
    const content = box.querySelector(".content");
    const area = el("textarea");
    area.value = text;
    area.rows = 3;
    const row = el("div", "row");
    row.append(button("Cancel", () => resolve(null)), button("Send", () => resolve(area.value)));
    content.replaceChildren(area, row);
    area.focus();
  });
}
