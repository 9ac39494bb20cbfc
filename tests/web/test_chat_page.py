"""The chat page in Chromium against a real daemon: streaming, stop, edit and regenerate, settings from /props,
the API key prompt, and finding a conversation again after the daemon restarts."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.web.helpers import open_page, save_settings, send, wait_for_answer

KEY = "sk-browser-key"


def test_chat_streams_and_the_conversation_survives_a_restart(page, daemon, tmp_path: Path) -> None:
    state = tmp_path / "state"
    server = daemon("-n", "24", state_dir=state)
    open_page(page, server.base_url)
    send(page, "Tell me a story about llamas")
    answer = wait_for_answer(page)
    assert answer.locator(".content").inner_text().strip()
    timings = answer.locator(".timings").inner_text()
    assert "24 tokens" in timings and "tokens/s" in timings and "prompt tokens" in timings
    assert page.locator("#conversations li .title").all_inner_texts() == ["Tell me a story about llamas"]
    shown = answer.locator(".content").inner_text()
    server.stop()

    again = daemon("-n", "24", state_dir=state)
    open_page(page, again.base_url)
    page.click("#conversations li .title:has-text('Tell me a story about llamas')")
    page.wait_for_selector(".msg.assistant")
    assert page.locator(".msg.user .content").inner_text().strip() == "Tell me a story about llamas"
    assert page.locator(".msg.assistant .content").inner_text() == shown
    assert page.js_errors == []


def test_stop_aborts_the_request_and_frees_the_slot(page, daemon) -> None:
    server = daemon("-n", "4000", "-c", "8192")
    open_page(page, server.base_url)
    send(page, "go on forever")
    page.wait_for_function("() => document.querySelector('.msg.assistant .content')?.textContent.length > 20")
    page.click("#stop")
    answer = wait_for_answer(page)
    assert answer.locator(".stopped").is_visible()
    assert page.locator("#send").is_enabled()
    with server.client() as client:
        deadline = time.monotonic() + 10
        while any(slot["is_processing"] for slot in client.get("/slots").json()):
            assert time.monotonic() < deadline, "the slot was still busy 10 s after Stop"
            time.sleep(0.05)
        # The stopped answer was kept, as far as it had come.
        conv = client.get("/webui/conversations").json()[0]
        messages = client.get(f"/webui/conversations/{conv['id']}").json()["messages"]
    assert messages[-1]["stopped"] is True and messages[-1]["content"]
    assert len(messages[-1]["content"]) < 4000 * 20


def test_edit_and_regenerate_add_branches(page, daemon) -> None:
    server = daemon("-n", "8")
    open_page(page, server.base_url)
    send(page, "first question")
    wait_for_answer(page)
    page.click(".msg.assistant button:has-text('Regenerate')")
    wait_for_answer(page)
    assert page.locator(".msg.assistant .branch").inner_text() == "2/2"
    page.click(".msg.user button:has-text('Edit')")
    page.fill(".msg.user textarea", "second question")
    page.click(".msg.user button:has-text('Send')")
    page.wait_for_function("() => document.querySelector('.msg.user .branch')?.textContent === '2/2'")
    wait_for_answer(page)
    assert page.locator(".msg.user .content").inner_text().strip() == "second question"
    page.click(".msg.user button:has-text('‹')")
    page.wait_for_function("() => document.querySelector('.msg.user .branch')?.textContent === '1/2'")
    assert page.locator(".msg.user .content").inner_text().strip() == "first question"
    assert page.locator(".msg.assistant .branch").inner_text() == "2/2"


def test_settings_start_from_the_server_and_reach_the_request(page, daemon) -> None:
    server = daemon("--webui-config", '{"systemMessage": "You are terse.", "temperature": 0.25}', "--temp", "0.7")
    open_page(page, server.base_url)
    page.click("#settings-open")
    assert page.input_value("#settings-form [name=systemMessage]") == "You are terse."
    assert float(page.input_value("#settings-form [name=temperature]")) == 0.25
    with server.client() as client:
        params = client.get("/props").json()["default_generation_settings"]["params"]
    assert int(page.input_value("#settings-form [name=top_k]")) == params["top_k"]
    assert float(page.input_value("#settings-form [name=top_p]")) == params["top_p"]
    page.click("#settings-form button[value=cancel]")
    save_settings(page, max_tokens=3, temperature=0)
    with page.expect_request("**/v1/chat/completions") as sent:
        send(page, "hello")
    body = sent.value.post_data_json
    assert body["messages"][0] == {"role": "system", "content": "You are terse."}
    assert body["max_tokens"] == 3 and body["temperature"] == 0 and body["stream"] is True
    assert "3 tokens" in wait_for_answer(page).locator(".timings").inner_text()


def test_the_page_asks_for_the_api_key_and_sends_it(page, daemon) -> None:
    server = daemon("--api-key", KEY, "-n", "4")
    page.goto(server.base_url + "/")
    page.wait_for_selector("#key-dialog[open]")
    page.fill("#key-input", KEY)
    page.click("#key-dialog button[value=ok]")
    page.wait_for_selector("body[data-ready=true]")
    assert "visible to your API key only" in page.inner_text("#store-note")
    send(page, "hello")
    wait_for_answer(page)
    with httpx.Client(base_url=server.base_url) as client:
        listed = client.get("/webui/conversations", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert [c["title"] for c in listed] == ["hello"]
