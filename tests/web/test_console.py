"""The operator console on the admin listener, in Chromium: it loads without the token and shows nothing until given
one; then each option's value, source and effect, a PATCH that is refused (the exact error, nothing changed) and one
that applies, a LoRA slider that /lora-adapters then reports, and the events. The public port serves none of it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxd.dev.synth_lora import make_adapter
from tests.e2e.conftest import launch

TOKEN = "console-token-1234"


@pytest.fixture
def admin_daemon(tiny_checkpoint: Path, tiny_model: Any, tmp_path: Path) -> Any:
    adapter = make_adapter(tiny_model.model, tmp_path / "lora" / "style", seed=3)
    (tmp_path / "token").write_text(TOKEN + "\n")
    running = launch(["-m", str(tiny_checkpoint), "--host", "127.0.0.1", "--port", "0", "--lora", str(adapter),
                      "--state-dir", str(tmp_path / "state"), "--admin-listen", "127.0.0.1:0",
                      "--admin-token-file", str(tmp_path / "token")], tmp_path / "mlxd.log")
    match = re.search(r"admin listening on (http://\S+)", running.log())
    assert match, running.log()
    yield running, match.group(1)
    running.stop()


def test_console_shows_sources_and_effects_refuses_and_applies(page, admin_daemon) -> None:
    running, admin_url = admin_daemon
    # The page itself needs no token; the API behind it does, and the public port has neither.
    assert "mlxd console" in httpx.get(admin_url + "/").text
    assert httpx.get(admin_url + "/v1/config").status_code == 401
    with running.client() as public:
        assert "mlxd console" not in public.get("/").text
        for path in ("/console.js", "/console.css", "/v1/config", "/v1/status"):
            assert public.get(path).status_code == 404, path

    page.goto(admin_url + "/")
    page.wait_for_selector("#error:not([hidden])")
    assert "401" in page.inner_text("#error")
    assert page.locator("#config tbody tr").count() == 0
    page.fill("#token", TOKEN)
    page.click("#token-form button")
    page.wait_for_selector("#config tbody tr[data-option=temperature]")
    row = page.locator("#config tbody tr[data-option=lora]")
    assert row.locator("td").nth(2).inner_text() == "cli:--lora"
    assert page.locator("#config tbody tr[data-option=host] td").nth(3).inner_text() == "restart"
    assert page.locator("#config tbody tr[data-option=temperature] td").nth(3).inner_text() == "live"
    page.fill("#filter", "ctx-size")
    assert page.locator("#config tbody tr").count() >= 1
    assert all("ctx-size" in t for t in page.locator("#config tbody tr td:first-child").all_inner_texts())
    page.fill("#filter", "")
    generation = page.inner_text("#status dd[data-key=generation]")

    # A refused change: the exact error, and nothing changed.
    page.fill("#patch-option", "flash-attn")
    page.fill("#patch-value", "off")
    page.click("#patch-form button[type=submit]")
    page.wait_for_selector("#patch-result.refused")
    refused = page.inner_text("#patch-result")
    with httpx.Client(base_url=admin_url, headers={"Authorization": f"Bearer {TOKEN}"}) as admin:
        status = admin.get("/v1/status").json()
        assert status["last_error"]["message"] in refused and "422 change_refused" in refused
        assert admin.get("/v1/config").json()["options"]["flash-attn"]["value"] == "auto"
    assert page.inner_text("#status dd[data-key=generation]") == generation

    # An applied change, seen in the table with its new source and in the events.
    page.fill("#patch-option", "temperature")
    page.fill("#patch-value", "0.25")
    page.click("#patch-form button[type=submit]")
    page.wait_for_function("() => document.querySelector('#patch-result').textContent.startsWith('applied')")
    page.wait_for_function("() => document.querySelector('#config tr[data-option=temperature] td:nth-child(3)')"
                           "?.textContent === 'admin'")
    assert page.inner_text("#config tr[data-option=temperature] td:nth-child(2)") == "0.25"
    page.wait_for_function("() => [...document.querySelectorAll('#events li')].some(li => "
                           "li.textContent.includes('temperature'))")

    # A LoRA slider: the public /lora-adapters reports the new scale.
    page.locator("#lora input[type=range]").fill("0.5")
    with running.client() as public:
        for _ in range(200):
            if public.get("/lora-adapters").json()[0]["scale"] == 0.5:
                break
            page.wait_for_timeout(25)
        assert public.get("/lora-adapters").json()[0]["scale"] == 0.5
    assert page.js_errors == []


def test_console_shows_slots_and_charts_the_load(page, admin_daemon) -> None:
    running, admin_url = admin_daemon
    page.goto(admin_url + "/")
    page.fill("#token", TOKEN)
    page.click("#token-form button")
    # The slots table: one row per slot of the model in service, as the public /slots lists them.
    page.wait_for_selector("#slots tbody tr")
    with running.client() as public:
        slots = public.get("/slots").json()
        model = public.get("/v1/models").json()["data"][0]["id"]
    rows = page.locator("#slots tbody tr")
    assert rows.count() == len(slots) >= 1
    assert rows.first.locator("td").nth(0).inner_text() == model
    assert [r.locator("td").nth(1).inner_text() for r in rows.all()] == [str(s["id"]) for s in slots]

    # A completion: its tokens reach the chart's legend, and the chart keeps receiving points.
    with running.client() as public:
        done = public.post("/completion", json={"prompt": "hello", "n_predict": 8, "temperature": 0})
    assert done.status_code == 200, done.text
    predicted = done.json()["tokens_predicted"]
    assert predicted > 0
    points = int(page.get_attribute("#chart-tps", "data-points") or "0")
    page.wait_for_function(f"() => document.querySelector('#load-legend').textContent.includes('(total {predicted})')",
                           timeout=10_000)
    page.wait_for_function(f"() => Number(document.querySelector('#chart-tps').dataset.points) >= {points + 2}",
                           timeout=10_000)
    assert page.locator("#chart-tps polyline").count() == 1
    assert page.locator("#chart-requests polyline").count() == 2
    # The slot that served it shows the task it ran.
    page.wait_for_function("() => [...document.querySelectorAll('#slots tbody tr td:nth-child(5)')]"
                           ".some(td => td.textContent !== '')")
    assert page.js_errors == []
