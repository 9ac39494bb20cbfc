"""``/v1/audio/transcriptions`` and ``/audio/transcriptions`` on the synthetic image-and-audio checkpoint (Gemma 4):
every rule b10621 applies to the form, the answer's shape streamed and whole, and the limits on the clip."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import synthetic_checkpoint
from tests.e2e.conftest import RunningServer, launch

pytest.importorskip("mlx_vlm")

PATHS = ["/v1/audio/transcriptions", "/audio/transcriptions"]


def wav(seconds: float = 0.5, rate: int = 16000, channels: int = 1, bits: int = 16, declared: float | None = None,
        seed: int = 0) -> bytes:
    """A PCM WAV of seeded noise; ``declared``: the seconds its data chunk claims (more than it holds)."""
    import numpy as np

    width = bits // 8
    n = int(seconds * rate) * channels
    if bits == 16:
        data = (np.random.RandomState(seed).randn(n) * 3000).astype("<i2").tobytes()
    else:
        data = (np.random.RandomState(seed).randint(0, 255, n)).astype("u1").tobytes()
    size = int((declared or seconds) * rate) * channels * width
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * channels * width, channels * width, bits)
    return (b"RIFF" + struct.pack("<I", 36 + size) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
            + b"data" + struct.pack("<I", size) + data)


def flac(samples: bytes, rate: int = 16000, block: int = 4096) -> bytes:
    """Mono 16-bit PCM (little-endian ``samples``) as a FLAC stream of VERBATIM subframes: the simplest valid FLAC,
    written here because no encoder is installed."""
    import numpy as np

    pcm = np.frombuffer(samples, "<i2")

    def crc8(data: bytes) -> int:
        crc = 0
        for byte in data:
            crc ^= byte
            for _ in range(8):
                crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
        return crc

    def crc16(data: bytes) -> int:
        crc = 0
        for byte in data:
            crc ^= byte << 8
            for _ in range(8):
                crc = ((crc << 1) ^ 0x8005) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
        return crc

    info = struct.pack(">HH", block, block) + b"\0" * 6  # block sizes; frame sizes unknown
    info += ((rate << 44) | (0 << 41) | (15 << 36) | len(pcm)).to_bytes(8, "big") + b"\0" * 16  # no MD5
    out = b"fLaC" + bytes([0x80]) + len(info).to_bytes(3, "big") + info
    for number, start in enumerate(range(0, len(pcm), block)):
        chunk = pcm[start:start + block]
        assert number < 128  # the frame number's UTF-8 coding is one byte
        header = bytes([0xFF, 0xF8, 0x70, 0x08, number]) + struct.pack(">H", len(chunk) - 1)
        frame = header + bytes([crc8(header), 0x02]) + chunk.astype(">i2").tobytes()
        out += frame + struct.pack(">H", crc16(frame))
    return out


@pytest.fixture(scope="module")
def audio_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # -n 6 bounds every answer, so that a repeated max_tokens (which falls back to "no limit") still ends soon.
    running = launch(["-m", str(synthetic_checkpoint("gemma4-tiny")), "--host", "127.0.0.1", "--port", "0",
                      "--admin-listen", "off", "-n", "6", "--temp", "0"], tmp_path_factory.mktemp("g4") / "mlxd.log")
    yield running
    running.stop()


@pytest.fixture
def client(audio_server: RunningServer) -> Iterator[httpx.Client]:
    with audio_server.client() as c:
        yield c


def post(client: httpx.Client, fields: list[tuple[str, str]] | None = None, files: Any = None,
         path: str = PATHS[0]) -> httpx.Response:
    files = [("file", ("a.wav", wav(), "audio/wav"))] if files is None else files
    data: dict[str, list[str]] = {}
    for name, value in fields or []:
        data.setdefault(name, []).append(value)
    if not files:  # a form with no file part at all
        return client.post(path, data=data, headers={"content-type": "application/x-www-form-urlencoded"})
    return client.post(path, data=data, files=files)


def chat_text(client: httpx.Client, prompt: str, clip: bytes, **fields: Any) -> dict[str, Any]:
    """The same request as a chat completion: the prompt text, then the clip."""
    content = [{"type": "text", "text": prompt},
               {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": "wav"}}]
    body = {"messages": [{"role": "user", "content": content}], "temperature": 0, **fields}
    return client.post("/v1/chat/completions", json=body).json()


def test_the_model_reports_image_and_audio(client: httpx.Client) -> None:
    assert client.get("/props").json()["modalities"] == {"vision": True, "video": False, "audio": True}


@pytest.mark.parametrize("path", PATHS)
def test_answer_is_the_chat_completion_of_the_default_prompt(client: httpx.Client, path: str) -> None:
    response = post(client, path=path)
    assert response.status_code == 200, response.text
    body = response.json()
    reference = chat_text(client, "Transcribe audio to text", wav())
    assert body["type"] == "transcript.text.done"
    assert body["text"] == reference["choices"][0]["message"]["content"]
    usage = body["usage"]
    assert usage["type"] == "tokens" and usage["input_tokens"] == reference["usage"]["prompt_tokens"]
    assert usage["output_tokens"] == 6 and usage["total_tokens"] == usage["input_tokens"] + 6
    assert set(usage["input_tokens_details"]) == {"cached_tokens"}


def test_prompt_and_language_make_the_prompt(client: httpx.Client) -> None:
    clip = wav(seed=1)
    files = [("file", ("a.wav", clip, "audio/wav"))]
    given = post(client, [("prompt", "Words spoken"), ("language", "fr")], files).json()
    reference = chat_text(client, "Words spoken (language: fr)", clip)
    assert given["text"] == reference["choices"][0]["message"]["content"]
    assert given["usage"]["input_tokens"] == reference["usage"]["prompt_tokens"]
    empty_language = post(client, [("language", "")], files).json()
    assert empty_language["usage"]["input_tokens"] == chat_text(client, "Transcribe audio to text", clip)["usage"][
        "prompt_tokens"]


def test_form_rules(client: httpx.Client) -> None:
    def error(response: httpx.Response) -> str:
        assert response.status_code == 400, response.text
        assert response.json()["error"]["type"] == "invalid_request_error"
        return response.json()["error"]["message"]

    assert error(post(client, [("model", "m")], files=[])) == "No input file found for transcription"
    assert error(post(client, files=[("audio", ("a.wav", wav(), "audio/wav"))])) == ("No input file found for "
                                                                                       "transcription")
    for fmt in ("text", "verbose_json", ""):
        assert error(post(client, [("response_format", fmt)])) == ("Only 'json' response_format is supported for "
                                                                    "transcription")
    assert post(client, [("response_format", "json")]).status_code == 200
    assert post(client, [("max_tokens", "2")]).json()["usage"]["output_tokens"] == 2
    assert post(client, [("max_tokens", "3 tokens")]).json()["usage"]["output_tokens"] == 3  # a leading number
    assert error(post(client, [("max_tokens", "many")])).startswith("Field 'max_tokens'")
    assert error(post(client, [("temperature", "warm")])).startswith("Field 'temperature'")
    assert post(client, [("temperature", "0.0")]).status_code == 200
    # A repeated field falls back to its default: response_format json, max_tokens unset (-n 6 applies).
    assert post(client, [("response_format", "text"), ("response_format", "text")]).status_code == 200
    assert post(client, [("max_tokens", "1"), ("max_tokens", "2")]).json()["usage"]["output_tokens"] == 6
    assert post(client, [("seed", "not a number"), ("foo", "bar")]).status_code == 200  # unknown fields ignored
    # The last file part wins.
    good, bad = ("file", ("a.wav", wav(), "audio/wav")), ("file", ("b.png", b"\x89PNG....", "image/png"))
    assert post(client, files=[bad, good]).status_code == 200
    assert error(post(client, files=[good, bad])) == "Failed to load image or audio file"


def test_stream_only_for_the_literal_true(client: httpx.Client) -> None:
    for word in ("True", "1", "yes"):
        response = post(client, [("stream", word)])
        assert response.headers["content-type"].startswith("application/json")
    response = post(client, [("stream", "true")])
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = [line[len("data: "):] for line in response.text.splitlines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    events = [json.loads(f) for f in frames[:-1]]
    deltas = [e for e in events if e["type"] == "transcript.text.delta"]
    done = events[-1]
    assert done["type"] == "transcript.text.done" and len(deltas) == done["usage"]["output_tokens"] == 6
    assert "".join(d["delta"] for d in deltas) == done["text"] == post(client).json()["text"]


def test_flac_decodes_to_the_same_clip_as_wav(client: httpx.Client) -> None:
    clip = wav(0.5, seed=0)
    as_wav = post(client, files=[("file", ("a.wav", clip, "audio/wav"))]).json()
    as_flac = post(client, files=[("file", ("a.flac", flac(clip[44:]), "audio/flac"))])
    assert as_flac.status_code == 200, as_flac.text
    assert as_flac.json()["text"] == as_wav["text"]
    other = post(client, files=[("file", ("b.wav", wav(0.5, seed=1), "audio/wav"))]).json()
    assert other["text"] != as_wav["text"]  # the answer depends on the clip, so the equality above means something
    assert as_flac.json()["usage"] == as_wav["usage"] | {"input_tokens_details": as_flac.json()["usage"][
        "input_tokens_details"]}


def test_clip_limits_before_decoding(client: httpx.Client) -> None:
    def message(clip: bytes) -> str:
        response = post(client, files=[("file", ("a.wav", clip, "audio/wav"))])
        assert response.status_code == 400, response.text
        return response.json()["error"]["message"]

    assert message(wav(0.01, channels=9)) == "audio has 9 channels (at most 8)"
    assert message(wav(0.01, rate=200_000)).startswith("audio sample rate 200000 Hz is out of range")
    assert message(wav(601, rate=8000, bits=8)) == "audio too long: 601 s (at most 600 s)"
    assert message(b"RIFF\0\0\0\0WAVE") == "Failed to load image or audio file"  # a header and nothing else
    assert message(b"\x89PNG\r\n\x1a\n" + b"\0" * 64) == "Failed to load image or audio file"  # wrong container
    assert message(b"\0" * (25 * 2**20 + 1)).startswith("media part too large")
    # A data chunk that declares more than the file holds is read as far as it goes.
    truncated = post(client, files=[("file", ("a.wav", wav(0.5, declared=500), "audio/wav"))])
    assert truncated.status_code == 200, truncated.text
    assert client.get("/health").status_code == 200


def test_a_clip_longer_than_the_window_is_cut_into_pieces(client: httpx.Client) -> None:
    short = post(client, files=[("file", ("a.wav", wav(1.0), "audio/wav"))]).json()["usage"]["input_tokens"]
    long = post(client, files=[("file", ("a.wav", wav(31.0), "audio/wav"))]).json()["usage"]["input_tokens"]
    # 30 s take the whole window (750 tokens); the last second is a second piece with its own begin/end tokens.
    assert long - short == 750 + 2


def test_multipart_parts_are_counted_and_measured_before_the_form_is_parsed(client: httpx.Client) -> None:
    """At most 32 parts of 25 MiB each (issue 28): 20,000 parts used to be parsed whole (+230 MB)."""
    many = [("file", (f"{i}.wav", b"x", "audio/wav")) for i in range(20_000)]
    answer = post(client, files=many)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"] == "too many form parts: 20000 (at most 32 per request)"
    just_over = post(client, fields=[("prompt", "p")] * 32)  # 32 fields and the file
    assert just_over.status_code == 400
    assert just_over.json()["error"]["message"] == "too many form parts: 33 (at most 32 per request)"
    big_field = post(client, fields=[("prompt", "p" * (26 * 2**20))])
    assert big_field.status_code == 400
    assert big_field.json()["error"]["message"].startswith("form part too large")
    assert post(client, fields=[("prompt", "p")] * 31).status_code == 200  # 32 parts is the limit, not past it
