"""Screenshots of the chat page and the operator console for the docs: ``python -m tests.web.screenshots``.

Starts a daemon on the tiny synthetic checkpoint (its answers are gibberish, so the chat page shows an imported
conversation that exercises the renderer), and writes docs/webui.png and docs/console.png.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.conftest import synthetic_checkpoint
from tests.e2e.conftest import launch
from tests.web.conftest import REPO_ROOT, chromium_path

DEMO = {"conversations": [{"title": "Reverse a list in Python", "leaf": "a1", "messages": [
    {"id": "u1", "parent": None, "role": "user", "content": "How do I reverse a list in Python?"},
    {"id": "a1", "parent": "u1", "role": "assistant", "reasoning": "Slicing or list.reverse(); mention both.",
     "content": "Two ways:\n\n1. **In place**: `items.reverse()`\n2. **A reversed copy**: `items[::-1]`\n\n"
                "```python\nitems = [1, 2, 3]\nprint(items[::-1])  # [3, 2, 1]\n```\n\n"
                "See [the tutorial](https://docs.python.org/3/tutorial/datastructures.html).",
     "timings": {"prompt_n": 18, "predicted_n": 52, "predicted_per_second": 41.7}}]}]}


def main() -> int:
    docs = REPO_ROOT / "docs"
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        (tmpdir / "token").write_text("screenshot-token\n")
        server = launch(["-m", str(synthetic_checkpoint("tiny")), "--host", "127.0.0.1", "--port", "0",
                         "--state-dir", str(tmpdir / "state"), "--admin-listen", "127.0.0.1:0",
                         "--admin-token-file", str(tmpdir / "token")], tmpdir / "mlxd.log")
        try:
            admin_url = re.search(r"admin listening on (http://\S+)", server.log()).group(1)  # type: ignore[union-attr]
            import httpx
            httpx.post(server.base_url + "/webui/import", json=DEMO).raise_for_status()
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1100, "height": 640})
                page.goto(server.base_url + "/")
                page.wait_for_selector("body[data-ready=true]")
                page.click("#conversations .title")
                page.wait_for_selector(".msg.assistant pre")
                page.click(".msg.assistant details.reasoning summary")
                page.screenshot(path=str(docs / "webui.png"))
                page.goto(admin_url + "/")
                page.fill("#token", "screenshot-token")
                page.click("#token-form button")
                page.wait_for_selector("#config tbody tr[data-option=temperature]")
                for _ in range(3):  # some load for the charts, a second apart
                    httpx.post(server.base_url + "/completion", json={"prompt": "hello", "n_predict": 32},
                               timeout=60).raise_for_status()
                    page.wait_for_timeout(1000)
                page.wait_for_function("() => Number(document.querySelector('#chart-tps').dataset.points) >= 4")
                page.fill("#patch-option", "flash-attn")
                page.fill("#patch-value", "off")
                page.click("#patch-form button[type=submit]")
                page.wait_for_selector("#patch-result.refused")
                page.fill("#filter", "cli:")
                page.set_viewport_size({"width": 1100, "height": 1300})
                page.screenshot(path=str(docs / "console.png"), full_page=False)
                browser.close()
        finally:
            server.stop()
    print("wrote docs/webui.png and docs/console.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
