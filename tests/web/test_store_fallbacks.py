"""The chat page when the server keeps no conversations: --no-webui-store (the browser keeps them), a corrupt
database and a read-only one (a clear error in the page, chat still works, the file untouched)."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.read_only_sqlite import read_only_sqlite_env
from tests.web.helpers import open_page, send, wait_for_answer


def test_without_the_store_the_browser_keeps_conversations(page, daemon) -> None:
    server = daemon("--no-webui-store", "-n", "4")
    open_page(page, server.base_url)
    assert page.inner_text("#store-note") == "Conversations are kept in this browser."
    send(page, "kept locally")
    wait_for_answer(page)
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    page.locator("#conversations").get_by_text("kept locally", exact=True).click()
    page.wait_for_selector(".msg.assistant .timings")
    assert page.locator(".msg.user .content").inner_text().strip() == "kept locally"
    assert page.locator("#banner").is_hidden()


def test_a_corrupt_database_shows_its_error_and_chat_goes_on(page, daemon, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    garbage = b"not sqlite at all\n" * 64
    (state / "webui.sqlite3").write_bytes(garbage)
    server = daemon("-n", "4", state_dir=state)
    open_page(page, server.base_url)
    banner = page.inner_text("#banner")
    assert "cannot be saved on the server" in banner and "not a database" in banner
    send(page, "still chatting")
    answer = wait_for_answer(page)
    assert "4 tokens" in answer.locator(".timings").inner_text()
    assert (state / "webui.sqlite3").read_bytes() == garbage


def test_a_read_only_database_shows_its_error_and_chat_goes_on(page, daemon, tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = daemon("-n", "4", state_dir=state)
    open_page(page, first.base_url)
    send(page, "saved before")
    wait_for_answer(page)
    page.wait_for_function("() => document.querySelectorAll('#conversations .title').length === 1")
    assert first.stop() == 0
    db = state / "webui.sqlite3"
    before = db.read_bytes()

    server = daemon("-n", "4", state_dir=state, env=read_only_sqlite_env(tmp_path / "hook"))
    open_page(page, server.base_url)
    page.locator("#conversations .title").first.wait_for()
    assert page.locator("#conversations .title").count() == 1  # what it holds is still listed
    page.click("#new-chat")
    send(page, "not saved")
    answer = wait_for_answer(page)
    assert "4 tokens" in answer.locator(".timings").inner_text()
    page.wait_for_selector("#banner:not([hidden])")
    banner = page.inner_text("#banner")
    assert "could not be saved" in banner and "readonly database" in banner
    assert db.read_bytes() == before
