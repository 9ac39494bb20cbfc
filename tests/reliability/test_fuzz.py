"""A seeded fuzz over the JSON routes of a real daemon: every answer is valid JSON without a non-finite number,
and nothing is a 5xx but b10621's own 500s (an image or audio part for a model without that tower)."""

from __future__ import annotations

import json
import random
from typing import Any

import httpx

from tests.e2e.conftest import RunningServer

ROUTES = ["/completion", "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize", "/apply-template",
          "/infill", "/embedding", "/v1/embeddings", "/v1/messages", "/v1/responses", "/slots/0?action=erase",
          "/v1/chat/completions/input_tokens", "/v1/messages/count_tokens", "/props", "/lora-adapters"]
FIELDS = ["prompt", "messages", "content", "tokens", "input", "n_predict", "max_tokens", "temperature", "top_k",
          "top_p", "min_p", "n_probs", "seed", "stream", "stop", "logit_bias", "samplers", "n_cmpl", "id_slot",
          "repeat_penalty", "mirostat", "grammar", "json_schema", "response_format", "tools", "with_pieces",
          "add_special", "input_prefix", "input_suffix", "model", "logprobs", "top_logprobs", "cache_prompt"]
NUMBERS = [0, -1, 1, 2, 1e308, -1e308, 1e-320, 10 ** 30, -(10 ** 30), 0.5, 3.7, 2 ** 63, -(2 ** 63), 255]
RAW_NUMBERS = [b"1e999", b"-1e999", b"9" * 400, b"NaN", b"Infinity", b"1e-999", b"-0"]


def _value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(9 if depth < 2 else 5)
    if pick == 0:
        return rng.choice(NUMBERS)
    if pick == 1:
        return rng.choice(["", "Hi", "Once upon a time", "\u00e9\u4e2d", "<|im_start|>", "a" * rng.randrange(200)])
    if pick == 2:
        return rng.choice([True, False, None])
    if pick == 3:
        return rng.randrange(-5, 300)
    if pick == 4:
        return rng.random() * rng.choice([1, 100, -1])
    if pick in (5, 6):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if pick == 7:
        return [{"role": rng.choice(["user", "assistant", "system", "x"]), "content": _value(rng, depth + 1)}
                for _ in range(rng.randrange(3))]
    return {rng.choice(FIELDS): _value(rng, depth + 1) for _ in range(rng.randrange(3))}


def body(rng: random.Random) -> bytes:
    """A JSON object of a few known fields with odd values, sometimes with a raw number JSON cannot hold."""
    doc = {rng.choice(FIELDS): _value(rng) for _ in range(rng.randrange(1, 6))}
    doc.setdefault("n_predict", rng.choice([1, 2, 4]))
    raw = json.dumps(doc).encode()
    if rng.random() < 0.2:
        raw = raw[:-1] + b', "temperature": ' + rng.choice(RAW_NUMBERS) + b"}"
    return raw


def _finite(text: str) -> bool:
    def refuse(_: str) -> Any:
        raise ValueError
    try:
        for line in text.splitlines() or [text]:
            payload = line[len("data: "):] if line.startswith("data: ") else line
            if payload and payload != "[DONE]" and payload[0] in "{[":
                json.loads(payload, parse_constant=refuse)
        return True
    except ValueError:
        return False



def _b10621s_500(response: httpx.Response) -> bool:
    """b10621's own 500: an image or audio part sent to a model without that tower."""
    return response.status_code == 500 and " input is not supported" in response.text

def fuzz_round(server: RunningServer, *, seed: int, n: int) -> dict[str, Any]:
    """``n`` seeded bodies over ROUTES; counts of statuses, non-finite answers and the 5xx seen."""
    rng = random.Random(seed)
    statuses: dict[int, int] = {}
    non_finite = 0
    server_errors: list[tuple[str, bytes, int, str]] = []
    with server.client(timeout=120) as client:
        for _ in range(n):
            route, raw = rng.choice(ROUTES), body(rng)
            response = client.post(route, content=raw, headers={"Content-Type": "application/json"})
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if not _finite(response.text):
                non_finite += 1
            if response.status_code >= 500 and response.status_code not in (501, 503) and not _b10621s_500(response):
                server_errors.append((route, raw[:300], response.status_code, response.text[:300]))
        slots = client.get("/slots")
        if not _finite(slots.text):
            non_finite += 1
        assert client.get("/health").status_code == 200
    return {"bodies": n, "statuses": dict(sorted(statuses.items())), "non_finite": non_finite,
            "server_errors": server_errors}


def test_fuzz_with_a_fixed_seed(server: RunningServer) -> None:
    report = fuzz_round(server, seed=10621, n=300)
    assert report["non_finite"] == 0, report
    assert report["server_errors"] == [], report["server_errors"][:5]
