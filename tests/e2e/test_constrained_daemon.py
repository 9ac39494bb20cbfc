"""Constrained output over HTTP from a real mlxd-server: a GBNF grammar, a JSON schema and ``response_format``
``json_object`` each hold for 20 seeds out of 20, streamed and not (the model's weights are random, so only the
constraint can make the output valid)."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.constraint_cases import (
    BOUNDED_OBJECT,
    GBNF,
    GBNF_LINE,
    SCHEMA,
    SEEDS,
    validate_bounded_object,
    validate_record,
)
from tests.e2e.conftest import RunningServer

MAX_TOKENS = 320


def _gbnf(text: str) -> None:
    assert GBNF_LINE.fullmatch(text), text


def _record(text: str) -> None:
    validate_record(json.loads(text))


def _object(text: str) -> None:
    validate_bounded_object(json.loads(text))


# (route, the constraint's fields, how to read the text, how to check it)
CASES: dict[str, tuple[str, dict[str, Any], Callable[[str], None]]] = {
    "gbnf": ("/completion", {"grammar": GBNF}, _gbnf),
    "json_schema": ("/completion", {"json_schema": SCHEMA}, _record),
    "json_object": ("/v1/chat/completions",
                    {"response_format": {"type": "json_object", "schema": BOUNDED_OBJECT}}, _object),
}


def _body(route: str, fields: dict[str, Any], seed: int, stream: bool) -> dict[str, Any]:
    if route == "/completion":
        return {"prompt": "Output:", "n_predict": MAX_TOKENS, "seed": seed, "stream": stream, **fields}
    return {"messages": [{"role": "user", "content": "Give me JSON."}], "max_tokens": MAX_TOKENS, "seed": seed,
            "stream": stream, **fields}


def _text(route: str, response: httpx.Response, stream: bool) -> tuple[str, str]:
    """The generated text and why it stopped."""
    assert response.status_code == 200, response.text
    if not stream:
        out = response.json()
        if route == "/completion":
            return out["content"], out["stop_type"]
        return out["choices"][0]["message"]["content"], out["choices"][0]["finish_reason"]
    frames = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    if route == "/completion":
        return "".join(f["content"] for f in frames), frames[-1]["stop_type"]
    deltas = [c["delta"].get("content") or "" for f in frames for c in f.get("choices", [])]
    reasons = [c["finish_reason"] for f in frames for c in f.get("choices", []) if c.get("finish_reason")]
    return "".join(deltas), reasons[-1]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_constraint_holds_for_every_seed(server: RunningServer, case: str, stream: bool) -> None:
    route, fields, check = CASES[case]

    def run(seed: int) -> tuple[str, str]:
        with server.client() as client:
            return _text(route, client.post(route, json=_body(route, fields, seed, stream)), stream)

    with ThreadPoolExecutor(max_workers=4) as pool:  # the daemon's slots batch them
        results = list(pool.map(run, SEEDS))
    for text, stopped in results:
        assert stopped in ("eos", "stop"), (stopped, text)  # the grammar's end ended it, not the token budget
        check(text)
    assert len({text for text, _ in results}) > 1  # the seeds really sample
