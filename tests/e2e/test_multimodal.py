"""Images through the real daemon on the synthetic Qwen2-VL checkpoint: chat, Anthropic, Responses and native
prompts, the prompt cache keyed on the image, every bad upload a 400, and the options that shape it."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from tests.conftest import synthetic_checkpoint
from tests.e2e.conftest import RunningServer, launch

pytest.importorskip("mlx_vlm")


def png(seed: int, size: tuple[int, int] = (100, 80)) -> bytes:
    """A PNG of seeded noise."""
    import numpy as np
    from PIL import Image

    pixels = (np.random.RandomState(seed).rand(size[1], size[0], 3) * 255).astype("uint8")
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` and whose pixel data is one tiny IDAT chunk."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b"")


def wav(seconds: float = 0.1, rate: int = 16000) -> bytes:
    n = int(seconds * rate)
    data = b"\0\0" * n
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
            + b"data" + struct.pack("<I", len(data)) + data)


def uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def image_message(url: str, text: str = "what is this") -> list[dict[str, Any]]:
    parts = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]
    return [{"role": "user", "content": parts}]


def chat(client: httpx.Client, url: str, **fields: Any) -> httpx.Response:
    body = {"messages": image_message(url), "max_tokens": 12, "temperature": 0, **fields}
    return client.post("/v1/chat/completions", json=body)


@pytest.fixture(scope="module")
def vl_checkpoint() -> Path:
    return synthetic_checkpoint("qwen2-vl-tiny")


@pytest.fixture(scope="module")
def vl_server(vl_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = launch(["-m", str(vl_checkpoint), "--host", "127.0.0.1", "--port", "0", "--admin-listen", "off"],
                     tmp_path_factory.mktemp("vl") / "mlxd.log")
    yield running
    running.stop()


@pytest.fixture
def client(vl_server: RunningServer) -> Iterator[httpx.Client]:
    with vl_server.client() as c:
        yield c


def test_image_chat_cache_is_keyed_on_the_image(client: httpx.Client) -> None:
    """Same image again: a prompt-cache hit with the cold answer; another image of the same size: a miss with
    another answer; a text follow-up never adopts an image prefix."""
    first = chat(client, uri(png(0))).json()
    assert first["usage"]["prompt_tokens"] > 20  # the image's placeholder was expanded to its patches
    counted = client.post("/v1/chat/completions/input_tokens", json={"messages": image_message(uri(png(0)))})
    assert counted.json() == {"input_tokens": first["usage"]["prompt_tokens"]}
    again = chat(client, uri(png(0))).json()
    assert again["timings"]["cache_n"] == first["usage"]["prompt_tokens"] - 1
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    other = chat(client, uri(png(1))).json()
    assert other["usage"]["prompt_tokens"] == first["usage"]["prompt_tokens"]
    assert other["timings"]["cache_n"] == 0
    assert other["choices"][0]["message"]["content"] != first["choices"][0]["message"]["content"]
    cold = chat(client, uri(png(1)), cache_prompt=False).json()
    assert cold["choices"][0]["message"]["content"] == other["choices"][0]["message"]["content"]


def test_anthropic_responses_and_native_prompts_take_images(client: httpx.Client) -> None:
    """An Anthropic image block and a Responses input_image render as the chat image part does; a native
    multimodal_data prompt splits at /props' media marker."""
    data = png(2)
    answer = chat(client, uri(data)).json()["choices"][0]["message"]["content"]
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(data).decode()}}
    anthropic = client.post("/v1/messages", json={"model": "m", "max_tokens": 12, "temperature": 0, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what is this"}, block]}]})
    assert anthropic.status_code == 200, anthropic.text
    assert anthropic.json()["content"][0]["text"] == answer
    responses = client.post("/v1/responses", json={"max_output_tokens": 12, "temperature": 0, "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "what is this"},
                                                        {"type": "input_image", "image_url": uri(data)}]}]})
    assert responses.status_code == 200, responses.text
    assert responses.json()["output"][0]["content"][0]["text"] == answer
    usage = anthropic.json()["usage"]  # b10621: input_tokens leaves out what the prompt cache read
    n_prompt = usage["input_tokens"] + usage.get("cache_read_input_tokens", 0)
    counted = client.post("/v1/messages/count_tokens", json={"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what is this"}, block]}]})
    assert counted.json() == {"input_tokens": n_prompt}
    marker = client.get("/props").json()["media_marker"]
    native = client.post("/completion", json={"n_predict": 6, "temperature": 0, "prompt": {
        "prompt_string": f"What is this: {marker}\n", "multimodal_data": [base64.b64encode(data).decode()]}})
    assert native.status_code == 200, native.text
    assert native.json()["tokens_evaluated"] > 20
    wrong = client.post("/completion", json={"n_predict": 2, "prompt": {
        "prompt_string": "no marker here", "multimodal_data": [base64.b64encode(data).decode()]}})
    assert wrong.status_code == 400


def test_props_and_models_report_the_modalities(client: httpx.Client) -> None:
    props = client.get("/props").json()
    assert props["modalities"] == {"vision": True, "video": False, "audio": False}
    models = client.get("/v1/models").json()
    assert models["models"][0]["capabilities"] == ["completion", "multimodal"]
    # Transcriptions need audio input: 501 before any field is read (this form would otherwise be a 400).
    for path in ("/v1/audio/transcriptions", "/audio/transcriptions"):
        audio = client.post(path, data={"response_format": "text"})
        assert audio.status_code == 501
        assert audio.json()["error"] == {"code": 501, "type": "not_supported_error",
                                         "message": "The current model does not support audio input."}


BAD_IMAGES = [
    ("malformed", "Failed to load image or audio file"),
    ("", "Invalid base64 value"),
    ("data:text/plain;base64,aGVsbG8=", "Invalid uri format: data:text/plain;base64"),
    ("data:image/png,abc", "uri must be base64 encoded"),
    ("data:image/png;base64,a,b", "Invalid uri-encoded base64 value"),
    (uri(png_header(30000, 30000)), "image too large"),
    (uri(png_header(9000, 9000)), "image too large: 9000 x 9000 pixels"),
    (uri(png(3)[:120]), "Failed to load image or audio file"),  # truncated
    (uri(wav()), "Failed to load image or audio file"),  # a WAV where an image goes: wrong container
    ("file://a.png", "file:// URLs are not allowed unless --media-path is specified"),
    ("http://127.0.0.1:9/none.png", "Failed to download image"),
]


@pytest.mark.parametrize("url,message", BAD_IMAGES, ids=[m.split(":")[0][:28] for _, m in BAD_IMAGES])
def test_bad_images_are_400_and_the_server_keeps_serving(client: httpx.Client, url: str, message: str) -> None:
    response = chat(client, url)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith(message)
    assert chat(client, uri(png(0)), max_tokens=1).status_code == 200


def test_too_many_parts_are_refused_before_decoding(client: httpx.Client) -> None:
    parts = [{"type": "image_url", "image_url": {"url": "not even base64 !"}}] * 33
    response = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": parts}]})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "too many media parts: 33 (at most 32 per request)"


def test_media_path_and_image_token_bounds(vl_checkpoint: Path, tmp_path: Path,
                                           start_server: Callable[..., RunningServer]) -> None:
    """file:// reads under --media-path only; --image-max-tokens caps an image's patches."""
    media = tmp_path / "media"
    (media / "sub").mkdir(parents=True)
    (media / "sub" / "cat.png").write_bytes(png(4, (200, 200)))
    (tmp_path / "secret.png").write_bytes(png(5))
    server = start_server("-m", str(vl_checkpoint), "--media-path", str(media), "--image-max-tokens", "4",
                          "--admin-listen", "off")
    with server.client() as c:
        ok = chat(c, "file://sub/cat.png", max_tokens=2)
        assert ok.status_code == 200, ok.text
        text_only = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "what is this"}],
                                                         "max_tokens": 1}).json()
        assert ok.json()["usage"]["prompt_tokens"] - text_only["usage"]["prompt_tokens"] <= 4 + 2 + 1
        for path, message in [("file://../secret.png", "file path is not allowed"),
                              (f"file://{tmp_path / 'secret.png'}", "file path is not allowed"),
                              ("file://sub/none.png", "file does not exist or cannot be opened")]:
            bad = chat(c, path)
            assert bad.status_code == 400 and bad.json()["error"]["message"].startswith(message), bad.text


def test_no_mmproj_serves_the_checkpoint_as_text_only(vl_checkpoint: Path,
                                                      start_server: Callable[..., RunningServer]) -> None:
    server = start_server("-m", str(vl_checkpoint), "--no-mmproj", "--admin-listen", "off")
    with server.client() as c:
        assert c.get("/props").json()["modalities"]["vision"] is False
        refused = chat(c, uri(png(0)))
        assert refused.status_code == 500
        assert refused.json()["error"]["message"].startswith("image input is not supported")
        text = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
        assert text.status_code == 200 and text.json()["usage"]["completion_tokens"] == 3


def zero_png(side: int) -> bytes:
    """An all-zero grayscale PNG of ``side`` x ``side`` pixels: a few hundred KB that decodes to side**2 bytes and
    more (compressed a row at a time, so the test never holds the pixels)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    packer = zlib.compressobj(9)
    row = b"\0" * (side + 1)  # the filter byte, then the row
    idat = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak RSS from /proc (Linux)")
def test_32_image_bombs_are_refused_before_decoding(client: httpx.Client, vl_server: RunningServer) -> None:
    """32 all-zero 8192 x 8192 PNGs (6 MB uploaded) used to peak at 9 GB: the pixels their headers declare are
    summed before any is decoded, and past one request's budget (mlxd.api.media_budget) the request is a 400."""
    bomb = uri(zero_png(8192))
    assert len(bomb) < 400_000
    before = peak_rss_bytes(vl_server.process.pid)
    parts: list[dict[str, Any]] = [{"type": "text", "text": "what are these"}]
    parts += [{"type": "image_url", "image_url": {"url": bomb}} for _ in range(32)]
    answer = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": parts}],
                                                       "max_tokens": 2})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"].startswith("images too large in total: 134217728 pixels")
    assert peak_rss_bytes(vl_server.process.pid) - before < 1536 * 2**20
    assert client.get("/health").status_code == 200
