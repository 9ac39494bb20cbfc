// Markdown to DOM, for untrusted text (model output, imported and stored conversations, titles).
// Every piece of text becomes a text node; elements come only from this file's own small set. No HTML is ever
// parsed, no image is loaded, and a link keeps its href only for http(s) and mailto.

const SAFE_LINK = /^(https?:|mailto:)/i;

export function renderMarkdown(text) {
  const root = document.createDocumentFragment();
  const lines = String(text).split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)/);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++;
      const pre = el("pre");
      const code = el("code");
      if (fence[2]) code.dataset.lang = fence[2];
      code.textContent = body.join("\n");
      pre.append(code);
      root.append(pre);
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      root.append(inlineInto(el("h" + Math.min(heading[1].length + 2, 6)), heading[2]));
      i++;
      continue;
    }
    if (/^\s*([-*_])(?:\s*\1){2,}\s*$/.test(line)) { root.append(el("hr")); i++; continue; }
    if (/^\s*>/.test(line)) {
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
      const q = el("blockquote");
      q.append(renderMarkdown(quoted.join("\n")));
      root.append(q);
      continue;
    }
    const item = /^\s*([-*+]|\d+[.)])\s+/;
    if (item.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = el(ordered ? "ol" : "ul");
      while (i < lines.length && item.test(lines[i])) list.append(inlineInto(el("li"), lines[i++].replace(item, "")));
      root.append(list);
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const para = [];
    while (i < lines.length && lines[i].trim() && !/^\s*(```|~~~|#{1,6}\s|>)/.test(lines[i]) && !item.test(lines[i])) {
      para.push(lines[i++]);
    }
    const p = el("p");
    para.forEach((text, n) => { if (n) p.append(el("br")); inlineInto(p, text); });
    root.append(p);
  }
  return root;
}

// `code`, **strong**, *em* / _em_, [text](url); everything else is text. Each span is bounded (no newline, at most
// 400 characters), so an unmatched marker costs a short scan, not one to the end of a long paragraph.
const INLINE = /(`{1,3})([^`\n]{1,400}?)\1|\*\*([^*\n]{1,400})\*\*|(?<![\w*])\*([^*\s][^*\n]{0,400}?)\*(?![\w*])|(?<!\w)_([^_\s][^_\n]{0,400}?)_(?!\w)|!?\[([^\]\n]{0,400})\]\(([^)\s]{0,2000})\)/g;

export function inlineInto(parent, text) {
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) parent.append(document.createTextNode(text.slice(last, m.index)));
    if (m[2] !== undefined) parent.append(textEl("code", m[2]));
    else if (m[3] !== undefined) parent.append(inlineInto(el("strong"), m[3]));
    else if (m[4] !== undefined) parent.append(inlineInto(el("em"), m[4]));
    else if (m[5] !== undefined) parent.append(inlineInto(el("em"), m[5]));
    else parent.append(link(m[6], m[7]));
    last = m.index + m[0].length;
  }
  if (last < text.length) parent.append(document.createTextNode(text.slice(last)));
  return parent;
}

function link(label, href) {
  const a = el("a");
  a.textContent = label || href;
  if (SAFE_LINK.test(href)) {
    a.href = href;
    a.rel = "noopener noreferrer nofollow";
    a.target = "_blank";
  }
  return a;
}

function el(tag) { return document.createElement(tag); }
function textEl(tag, text) { const e = el(tag); e.textContent = text; return e; }
