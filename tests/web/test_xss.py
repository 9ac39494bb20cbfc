"""Untrusted text shows as text: classic XSS payloads in assistant answers (markdown), reasoning, tool calls,
attachment names, user messages and conversation titles, arriving through an imported file, the server's store and
the page's own Rename. Nothing runs, nothing loads from anywhere but the page's own server."""

from __future__ import annotations

import json
from pathlib import Path

from tests.web.helpers import open_page

PAYLOADS = [
    "<script>window.__xss=1</script>",
    "<img src=x onerror=\"window.__xss=1\">",
    "<svg onload=\"window.__xss=1\"><circle r=9></circle></svg>",
    "<iframe src=\"javascript:window.__xss=1\"></iframe>",
    "<a href=\"javascript:window.__xss=1\">click me</a>",
    "\"><script>window.__xss=1</script><b x=\"",
    "<body onload=window.__xss=1>",
    "<details open ontoggle=window.__xss=1>x</details>",
    "<math><mtext><table><mglyph><style><img src=x onerror=window.__xss=1>",
    "<input autofocus onfocus=window.__xss=1>",
    "<img src=\"http://127.0.0.2:9/beacon.png\">",
    "<style>@import 'http://127.0.0.2:9/x.css';</style>",
    "{{constructor.constructor('window.__xss=1')()}}",
    "javascript:window.__xss=1",
]
# Markdown that must not turn into a script link or a loaded image (its text may be rendered).
MARKDOWN = [
    "[click](javascript:window.__xss=1)",
    "![pic](http://127.0.0.2:9/md-image.png)",
    "[x](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX194c3M9MTwvc2NyaXB0Pg==)",
]
FORBIDDEN = "script, iframe, svg, object, embed, style, input, math, body, frame, link, meta, base, form"


def conversation(n: int, payload: str) -> dict:
    return {
        "title": payload,
        "leaf": "a1",
        "messages": [
            {"id": "u1", "parent": None, "role": "user", "content": payload,
             "attachments": [{"kind": "image", "name": payload, "data": "javascript:window.__xss=1"},
                             {"kind": "image", "name": "remote", "data": "http://127.0.0.2:9/attachment.png"}]},
            {"id": "a1", "parent": "u1", "role": "assistant", "content": f"answer {n}:\n\n{payload}\n\n"
             + "\n\n".join(MARKDOWN) + f"\n\n```html\n{payload}\n```\n\n- {payload}\n\n> {payload}",
             "reasoning": payload, "tool_calls": [{"name": payload, "arguments": payload}],
             "timings": {"predicted_n": payload, "prompt_n": payload}},
        ],
    }


def assert_inert(page, foreign: list[str], dialogs: list[str]) -> None:
    page.wait_for_timeout(150)  # onerror/onload handlers would have fired by now
    assert page.evaluate("() => window.__xss") is None
    assert dialogs == [] and foreign == []
    assert page.locator(f"#messages :is({FORBIDDEN}), #conversations :is({FORBIDDEN})").count() == 0
    assert page.locator("#messages a[href^='javascript'], #messages a[href^='data']").count() == 0
    srcs = page.eval_on_selector_all("#messages img, #messages audio", "els => els.map(e => e.getAttribute('src'))")
    assert all(src.startswith(("data:image/", "data:audio/")) for src in srcs), srcs
    handlers = page.evaluate("""() => [...document.querySelectorAll('#messages *, #conversations *')]
        .flatMap(e => [...e.attributes].map(a => a.name)).filter(n => n.startsWith('on'))""")
    assert handlers == []


def test_payloads_in_imported_conversations_show_as_text(page, daemon, tmp_path: Path) -> None:
    server = daemon()
    dialogs: list[str] = []
    foreign: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("request", lambda r: None if r.url.startswith(server.base_url) else foreign.append(r.url))
    open_page(page, server.base_url)
    export = tmp_path / "import.json"
    export.write_text(json.dumps({"conversations": [conversation(n, p) for n, p in enumerate(PAYLOADS)]}))
    page.set_input_files("#import", str(export))
    page.wait_for_function("n => document.querySelectorAll('#conversations li').length === n", arg=len(PAYLOADS))
    assert sorted(page.locator("#conversations li .title").all_text_contents()) == sorted(PAYLOADS)
    for n, payload in enumerate(PAYLOADS):
        page.locator("#conversations").get_by_text(payload, exact=True).click()
        page.wait_for_function("n => document.querySelector('.msg.assistant .content')?.textContent"
                               ".startsWith('answer ' + n + ':')", arg=n)
        text = page.inner_text("#messages")
        assert text.count(payload) >= 3, (payload, text)  # the question, the answer, its code block
        assert page.text_content(".msg.assistant .reasoning-text") == payload  # in a closed <details>
        assert page.inner_text(".msg.assistant pre code") == payload
        assert page.locator(".msg.user .attachment-name").first.inner_text() == payload
        assert_inert(page, foreign, dialogs)


def test_payload_titles_given_through_the_page_and_the_store_show_as_text(page, daemon) -> None:
    server = daemon()
    with server.client() as client:
        for payload in PAYLOADS[:5]:
            cid = client.post("/webui/conversations", json={"title": payload}).json()["id"]
            client.put(f"/webui/conversations/{cid}/messages/m1", json={"role": "assistant", "content": payload})
    foreign: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(server.base_url) else foreign.append(r.url))
    open_page(page, server.base_url)
    assert sorted(page.locator("#conversations li .title").all_text_contents()) == sorted(PAYLOADS[:5])
    # Rename one through the page, to each of the other payloads in turn.
    dialogs: list[str] = []
    for payload in PAYLOADS[5:]:
        page.once("dialog", lambda d, p=payload: d.accept(p))
        page.locator("#conversations li button.rename").first.click()
        page.wait_for_function("p => [...document.querySelectorAll('#conversations .title')]"
                               ".some(e => e.textContent === p)", arg=payload)
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.locator("#conversations li .title").first.click()
    page.wait_for_selector(".msg.assistant")
    assert_inert(page, foreign, dialogs)
