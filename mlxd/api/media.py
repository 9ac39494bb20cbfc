"""Media of a request: where b10621 takes images and audio from, the limits checked before anything is decoded,
and the decoding itself (Pillow for images, miniaudio for wav, mp3 and flac).

Sources follow b10621's ``handle_media``: ``http(s)://`` is downloaded (at most 10 MB, 10 s), ``file://`` is read
only under ``--media-path`` (a relative path without ``..``), ``data:image/...;base64,`` is decoded for images, and
anything else is tried as raw base64. Where b10621 answers a bad upload with a 500 (its ``runtime_error``), mlxd
answers 400 ``invalid_request_error`` with the same message: bad input is the client's error (design principle 5).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import re
import secrets
import struct
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from mlxd.errors import InvalidRequest

# Limits, all checked on the bytes or the header before any pixel or sample is decoded.
MAX_PARTS = 32  # media per request
MAX_PART_BYTES = 25 * 2**20  # one medium's encoded size
MAX_DOWNLOAD_BYTES = 10 * 2**20  # b10621's remote download cap
DOWNLOAD_TIMEOUT_S = 10.0
MAX_PIXELS = 8192 * 8192  # one image's width x height, as its header declares it
MAX_SIDE = 16384
MAX_AUDIO_RATE = 192_000
MAX_AUDIO_CHANNELS = 8
MAX_AUDIO_SECONDS = 600.0
AUDIO_RATE = 16_000  # what speech towers take; the feature extractor's own rate wins when it has one

LOAD_FAILED = "Failed to load image or audio file"


def _marker() -> str:
    # b10621's media marker: random per process unless LLAMA_MEDIA_MARKER pins it, so that user text cannot
    # forge one.
    pinned = os.environ.get("LLAMA_MEDIA_MARKER")
    return pinned if pinned else f"<__media_{secrets.token_hex(8)}__>"


MARKER = _marker()


@dataclass(frozen=True)
class Source:
    """One media part as the request gave it: image or audio, and its url/data string."""

    kind: str
    url: str
    accept_data_uri: bool = True
    data: bytes | None = None  # the bytes themselves (an uploaded file), instead of ``url``


def check_count(n: int) -> None:
    if n > MAX_PARTS:
        raise InvalidRequest(f"too many media parts: {n} (at most {MAX_PARTS} per request)")


_BOUNDARY = re.compile(r'boundary="?([^";,\s]+)"?', re.IGNORECASE)
PART_HEAD_BYTES = 64 * 1024  # room for a part's own headers beside its content


def check_multipart(content_type: str, body: bytes) -> None:
    """A multipart form's parts counted and measured on the raw body (a C-speed search for the boundary), before
    sanic parses it: at most MAX_PARTS parts of MAX_PART_BYTES each (20,000 parts used to be parsed whole)."""
    match = _BOUNDARY.search(content_type or "")
    if match is None:
        return
    delimiter = b"--" + match.group(1).encode("latin-1", errors="replace")
    n_parts = body.count(delimiter) - 1  # the closing delimiter ends the last part
    if n_parts > MAX_PARTS:
        raise InvalidRequest(f"too many form parts: {n_parts} (at most {MAX_PARTS} per request)")
    start = body.find(delimiter)
    while start != -1:
        end = body.find(delimiter, start + len(delimiter))
        if end != -1 and end - start > MAX_PART_BYTES + PART_HEAD_BYTES:
            raise InvalidRequest(f"form part too large: {end - start} bytes (at most {MAX_PART_BYTES})")
        start = end


def read_source(src: Source, media_path: str | None) -> bytes:
    """The encoded bytes of one source (blocking: downloads and file reads); ``InvalidRequest`` on any failure."""
    url = src.url
    if src.data is not None:
        data = src.data
    elif url.startswith("http"):
        data = _download(url)
    elif url.startswith("file://"):
        data = _read_local(url[len("file://"):], media_path)
    elif src.accept_data_uri and url.startswith("data:"):
        parts = url.split(",")
        if len(parts) != 2:
            raise InvalidRequest("Invalid uri-encoded base64 value")
        if not parts[0].startswith("data:image/"):
            raise InvalidRequest(f"Invalid uri format: {parts[0]}")
        if not parts[0].endswith("base64"):
            raise InvalidRequest("uri must be base64 encoded")
        data = b64decode(parts[1])
    else:
        data = b64decode(url)
        if not data:
            raise InvalidRequest("Invalid base64 value")
    if len(data) > MAX_PART_BYTES:
        raise InvalidRequest(f"media part too large: {len(data)} bytes (at most {MAX_PART_BYTES})")
    return data


def b64decode(text: str) -> bytes:
    """Base64 as b10621 decodes it: characters outside the alphabet end the data; padding is optional."""
    if len(text) > MAX_PART_BYTES * 4 // 3 + 4:
        raise InvalidRequest(f"media part too large: about {len(text) * 3 // 4} bytes (at most {MAX_PART_BYTES})")
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
    end = next((i for i, ch in enumerate(text) if ch not in alphabet), len(text))
    body = text[:end]
    if len(body) % 4 == 1:  # a lone trailing character carries no whole byte
        body = body[:-1]
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        return b""


def _download(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:  # noqa: S310 (b10621 does it)
            data = response.read(MAX_DOWNLOAD_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise InvalidRequest("Failed to download image") from exc
    if len(data) > MAX_DOWNLOAD_BYTES:
        raise InvalidRequest("Failed to download image")
    return data


def _read_local(path: str, media_path: str | None) -> bytes:
    if not media_path:
        raise InvalidRequest("file:// URLs are not allowed unless --media-path is specified")
    rel = PurePosixPath(path)
    if not path or rel.is_absolute() or ".." in rel.parts or "\\" in path or "\0" in path:
        raise InvalidRequest(f"file path is not allowed: {path}")
    root = Path(media_path).resolve()
    full = (root / rel).resolve()
    if root != full and root not in full.parents:  # a symlink out of --media-path
        raise InvalidRequest(f"file path is not allowed: {path}")
    try:
        with open(full, "rb") as f:
            data = f.read(MAX_PART_BYTES + 1)
    except OSError as exc:
        raise InvalidRequest(f"file does not exist or cannot be opened: {path}") from exc
    return data


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- images ------------------------------------------------------------------------------------------------------
def _opened(data: bytes) -> Any:
    """A PIL image with only its header read, its declared size checked against the per-image limits."""
    from PIL import Image, UnidentifiedImageError

    limit = f"at most {MAX_PIXELS} pixels, {MAX_SIDE} per side"
    try:
        img = Image.open(io.BytesIO(data))
        width, height = img.size
    except Image.DecompressionBombError as exc:  # Pillow's own guard, far above ours, met while reading the header
        raise InvalidRequest(f"image too large ({limit})") from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise InvalidRequest(LOAD_FAILED) from exc
    if width < 1 or height < 1 or width > MAX_SIDE or height > MAX_SIDE or width * height > MAX_PIXELS:
        raise InvalidRequest(f"image too large: {width} x {height} pixels ({limit})")
    return img


def image_pixels(data: bytes) -> int:
    """The pixels an image declares in its header (nothing is decoded), after the per-image checks."""
    width, height = _opened(data).size
    return int(width) * int(height)


def decode_image(data: bytes) -> Any:
    """An RGB PIL image; the header's size is checked before the pixels are decoded."""
    from PIL import Image

    img = _opened(data)
    try:
        img.load()
        return img.convert("RGB")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise InvalidRequest(LOAD_FAILED) from exc


# -- audio -------------------------------------------------------------------------------------------------------
def check_wav_header(data: bytes) -> bytes:
    """A RIFF/WAVE file's header within the limits; returns the file with its data chunk clamped to the bytes
    actually present (a header may declare more audio than the file holds)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return data
    pos, fmt = 12, None
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        if cid == b"fmt " and pos + 24 <= len(data):
            _, channels, rate, _, align, bits = struct.unpack("<HHIIHH", data[pos + 8:pos + 24])
            fmt = (channels, rate, align)
        if cid == b"data":
            if fmt is None:
                raise InvalidRequest(LOAD_FAILED)
            channels, rate, align = fmt
            if not 1 <= channels <= MAX_AUDIO_CHANNELS:
                raise InvalidRequest(f"audio has {channels} channels (at most {MAX_AUDIO_CHANNELS})")
            if not 1 <= rate <= MAX_AUDIO_RATE:
                raise InvalidRequest(f"audio sample rate {rate} Hz is out of range (at most {MAX_AUDIO_RATE})")
            present = min(size, len(data) - pos - 8)
            if align and present // align / rate > MAX_AUDIO_SECONDS:
                raise InvalidRequest(f"audio too long: {present // align / rate:.0f} s (at most "
                                     f"{MAX_AUDIO_SECONDS:.0f} s)")
            if present != size:
                header = data[:pos + 4] + struct.pack("<I", present)
                riff = struct.pack("<I", len(header) - 8 + present)
                return data[:4] + riff + header[8:] + data[pos + 8:pos + 8 + present]
            return data
        pos += 8 + size + (size & 1)
    raise InvalidRequest(LOAD_FAILED)


def decode_audio(data: bytes, rate: int = AUDIO_RATE) -> Any:
    """Mono float32 samples at ``rate`` from wav, mp3 or flac bytes (miniaudio picks the container)."""
    import miniaudio
    import numpy as np

    data = check_wav_header(data)
    try:
        decoded = miniaudio.decode(data, output_format=miniaudio.SampleFormat.FLOAT32, nchannels=1,
                                   sample_rate=rate)
    except (miniaudio.MiniaudioError, ValueError, TypeError) as exc:
        raise InvalidRequest(LOAD_FAILED) from exc
    samples = np.frombuffer(decoded.samples, dtype=np.float32).copy()
    if samples.size == 0:
        raise InvalidRequest(LOAD_FAILED)
    if samples.size / rate > MAX_AUDIO_SECONDS:
        raise InvalidRequest(f"audio too long: {samples.size / rate:.0f} s (at most {MAX_AUDIO_SECONDS:.0f} s)")
    return samples
