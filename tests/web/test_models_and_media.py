"""The chat page with a multimodal synthetic model (an image attachment reaches the model) and in router mode (the
model selector lists /models with their status; choosing one loads it and the chat goes to it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx

from tests.conftest import synthetic_checkpoint
from tests.web.helpers import open_page, send, wait_for_answer


def test_an_image_goes_to_a_multimodal_model(page, daemon, tmp_path: Path) -> None:
    from PIL import Image

    picture = tmp_path / "red.png"
    Image.new("RGB", (32, 32), (200, 20, 20)).save(picture)
    server = daemon("-m", str(synthetic_checkpoint("qwen2-vl-tiny")), "-n", "6")
    open_page(page, server.base_url)
    assert page.locator("#attach-label").is_visible()
    assert "image/*" in (page.get_attribute("#attach", "accept") or "")
    page.set_input_files("#attach", str(picture))
    page.wait_for_selector("#attachments span:has-text('red.png')")
    with page.expect_request("**/v1/chat/completions") as sent:
        send(page, "What colour is this?")
    parts = sent.value.post_data_json["messages"][-1]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    answer = wait_for_answer(page)
    assert "6 tokens" in answer.locator(".timings").inner_text()
    assert page.locator(".msg.user img.attachment").get_attribute("src").startswith("data:image/png;base64,")


def test_a_text_model_offers_no_attachment(page, daemon) -> None:
    server = daemon()
    open_page(page, server.base_url)
    assert page.locator("#attach-label").is_hidden()
    assert page.locator("#model").is_hidden()


def test_router_mode_lists_models_and_switches(page, daemon, tmp_path: Path, tiny_checkpoint: Path) -> None:
    models = tmp_path / "models"
    for name in ("alpha", "beta"):
        shutil.copytree(tiny_checkpoint, models / name)
    (tmp_path / "store").mkdir()
    server = daemon("--models-dir", str(models), "--models-max", "2", "--model-store-root", str(tmp_path / "store"),
                    "-n", "4", model=False)
    open_page(page, server.base_url)
    options = page.locator("#model option")
    assert options.count() == 2
    page.wait_for_function("() => [...document.querySelectorAll('#model option')]"
                           ".some(o => o.textContent.endsWith('(loaded)'))")
    page.select_option("#model", "beta")
    page.wait_for_function("() => document.querySelector('#model option[value=beta]').textContent === "
                           "'beta (loaded)'")
    with httpx.Client(base_url=server.base_url) as client:
        states = {m["id"]: m["status"]["value"] for m in client.get("/models").json()["data"]}
    assert states["beta"] == "loaded"
    with page.expect_request("**/v1/chat/completions") as sent:
        send(page, "hello beta")
    assert sent.value.post_data_json["model"] == "beta"
    wait_for_answer(page)
    assert page.locator(".msg.assistant .content .error").count() == 0
