"""Browser tests: Playwright's Python package driving the system's Chromium (Debian's ``chromium``) against real
daemons on 127.0.0.1 port 0.

Without Chromium or Playwright the tests skip with the reason, except under CI (``CI=true``), where they fail: CI
installs both (.ci/run). A failing test leaves a screenshot of its page under .cache/web-failures/.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningServer, launch

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
FAILURES = REPO_ROOT / ".cache" / "web-failures"
CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    configured = os.environ.get("MLXD_CHROMIUM")
    if configured:
        return configured
    return next((found for name in CANDIDATES if (found := shutil.which(name))), None)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser tests cannot run in CI: {reason}")
    pytest.skip(f"browser tests need {reason}")


# Package scope: Playwright's sync API keeps an event loop running on the main thread while it is open, so a test
# after tests/web that calls asyncio.run would fail if the browser outlived the package.
@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright (pip install -e '.[test]')")
    path = chromium_path()
    if path is None:
        _unavailable("Chromium (apt-get install chromium, or MLXD_CHROMIUM=/path/to/chrome)")
    with sync_playwright() as pw:
        # --no-sandbox: CI containers run as root, where Chromium's sandbox cannot start.
        instance = pw.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
        yield instance
        instance.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[FAILED_KEY] = report.failed
    return report


FAILED_KEY = pytest.StashKey[bool]()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser context and page; screenshotted when the test fails."""
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.js_errors = errors
    yield page
    if request.node.stash.get(FAILED_KEY, False):
        FAILURES.mkdir(parents=True, exist_ok=True)
        shot = FAILURES / f"{request.node.name}.png"
        try:
            page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot: {shot}")
        except Exception as exc:  # a crashed page still fails the test; only the picture is lost
            print(f"no screenshot: {exc}")
    context.close()


@pytest.fixture
def daemon(tiny_checkpoint: Path, tmp_path: Path) -> Iterator[Callable[..., RunningServer]]:
    """Factory: ``daemon(*args)`` starts mlxd-server on the tiny checkpoint with its state under tmp_path."""
    started: list[RunningServer] = []

    def start(*args: str, model: bool = True, state_dir: Path | None = None,
              env: dict[str, str] | None = None) -> RunningServer:
        argv = list(args)
        if model and "-m" not in argv:
            argv = ["-m", str(tiny_checkpoint), *argv]
        argv += ["--host", "127.0.0.1", "--port", "0"]
        if "--state-dir" not in argv:
            argv += ["--state-dir", str(state_dir or tmp_path / "state")]
        running = launch(argv, tmp_path / f"mlxd-{len(started)}.log", env=env)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop(timeout=30)
