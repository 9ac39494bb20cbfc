"""The domains of the options whose values are small languages: ``--lora-scaled FNAME:SCALE`` and ``--logit-bias
TOKEN_ID(+|-)BIAS``. They are parsed here, once, so that a bad value is a configuration error like any other
(refused before a weight is read) and the engine receives parsed values."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def lora_scaled(item: str) -> tuple[str, float]:
    """``FNAME:SCALE`` (the last colon splits, so a path may hold colons); ValueError if it is not that."""
    fname, sep, scale_text = str(item).rpartition(":")
    try:
        scale = float(scale_text)
    except ValueError:
        scale = math.nan
    if not sep or not fname or not math.isfinite(scale):
        raise ValueError("expected FNAME:SCALE with a finite number as SCALE")
    return fname, scale


def lora_adapters(lora: Sequence[str], scaled: Sequence[tuple[str, float]],
                  init_without_apply: bool) -> list[tuple[str, float]]:
    """The adapters a configuration loads, in id order: ``--lora`` (scale 1), then ``--lora-scaled``; every scale
    0 with ``--lora-init-without-apply`` (applied later through ``POST /lora-adapters``)."""
    adapters = [(str(p), 1.0) for p in lora if str(p)] + [(str(p), float(s)) for p, s in scaled]
    return [(path, 0.0) for path, _ in adapters] if init_without_apply else adapters


def logit_bias_entry(entry: str) -> tuple[int, float]:
    """``TOKEN_ID(+|-)BIAS`` such as ``15043+1`` or ``2-inf``; ValueError if it is not that."""
    text = entry.strip()
    digits = len(text) - len(text.lstrip("+-"))
    i = digits
    while i < len(text) and text[i].isdigit():
        i += 1
    if i == digits or i >= len(text) or text[i] not in "+-":
        raise ValueError(f"invalid logit bias {entry!r}: expected TOKEN_ID(+/-)BIAS")
    bias = float(text[i + 1:]) * (-1.0 if text[i] == "-" else 1.0)
    return int(text[:i]), bias


def logit_bias(entries: Iterable[str | tuple[int, float]]) -> dict[int, float]:
    """``--logit-bias`` values into ``{token: bias}``; repeated tokens add up."""
    out: dict[int, float] = {}
    for entry in entries:
        token, bias = logit_bias_entry(entry) if isinstance(entry, str) else (int(entry[0]), float(entry[1]))
        out[token] = out.get(token, 0.0) + bias
    return out
