"""What a person does in the chat page, as Playwright calls."""

from __future__ import annotations

from typing import Any


def open_page(page: Any, base_url: str) -> None:
    page.goto(base_url + "/")
    page.wait_for_selector("body[data-ready=true]")


def send(page: Any, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")


def wait_for_answer(page: Any, count: int = 1, timeout_ms: int = 60_000) -> Any:
    """The ``count``-th assistant message, once it has finished (its timings or its "stopped" mark show)."""
    page.wait_for_function(
        "n => document.querySelectorAll('.msg.assistant .meta .timings, .msg.assistant .meta .stopped, "
        ".msg.assistant .content .error').length >= n", arg=count, timeout=timeout_ms)
    return page.locator(".msg.assistant").nth(count - 1)


def save_settings(page: Any, **fields: object) -> None:
    page.click("#settings-open")
    for name, value in fields.items():
        page.fill(f"#settings-form [name={name}]", str(value))
    page.click("#settings-form button[value=save]")
