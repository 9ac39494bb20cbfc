"""Valid JSON everywhere: non-finite numbers go out as null (responses, streams, /slots) and non-finite or
overflowing numbers coming in are 400s in b10621's envelope."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from mlxd import json_out
from mlxd.config import Config
from tests.e2e.api_harness import AppServer, serving_in_process


def strict(text: str) -> Any:
    """Parse as a strict JSON parser does: NaN and Infinity are errors."""
    def refuse(name: str) -> Any:
        raise AssertionError(f"non-JSON literal {name} in {text[:200]}")
    return json.loads(text, parse_constant=refuse)


def strict_stream(text: str) -> list[Any]:
    return [strict(line[len("data: "):]) for line in text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


@pytest.fixture(scope="module")
def app(tiny_model: Any) -> Iterator[AppServer]:
    with serving_in_process(tiny_model, ctx_size=512, config=Config(parallel=2, ctx_size=512, slots=True)) as s:
        yield s


def test_the_encoder_writes_non_finite_numbers_as_null() -> None:
    payload = {"a": math.inf, "b": [-math.inf, math.nan, 1.5], "c": ({"d": math.nan},), "e": "Infinity"}
    assert strict(json_out.dumps(payload)) == {"a": None, "b": [None, None, 1.5], "c": [{"d": None}],
                                                "e": "Infinity"}
    assert json_out.dumps({"x": 1.0}) == '{"x":1.0}'


def test_logprobs_over_the_whole_vocabulary_are_valid_json(app: AppServer, tiny_model: Any) -> None:
    n_vocab = int(tiny_model.vocab_size)
    body = {"prompt": "Once", "n_predict": 2, "temperature": 0, "n_probs": n_vocab}
    with app.client() as client:
        whole = client.post("/completion", json=body)
        assert whole.status_code == 200
        probs = strict(whole.text)["completion_probabilities"]
        assert probs and len(probs[0]["top_logprobs"]) > 0
        streamed = client.post("/completion", json={**body, "stream": True})
        assert strict_stream(streamed.text)
        oai = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                        "max_tokens": 2, "logprobs": True, "top_logprobs": 20,
                                                        "n_probs": n_vocab})
        strict(oai.text)
        assert strict(client.get("/slots").text)


@pytest.mark.parametrize("raw", [
    b'{"prompt": "a", "n_predict": 1, "temperature": 1e999}',
    b'{"prompt": "a", "n_predict": 1, "top_p": -1e999}',
    b'{"prompt": "a", "n_predict": 1, "temperature": ' + b"9" * 400 + b"}",
    b'{"prompt": "a", "n_predict": 1, "logit_bias": [[1, ' + b"9" * 400 + b"]]}",
    b'{"prompt": "a", "n_predict": 1, "temperature": Infinity}',
    b'{"prompt": "a", "n_predict": 1, "temperature": NaN}',
])
def test_non_finite_or_overflowing_numbers_are_400(app: AppServer, raw: bytes) -> None:
    with app.client() as client:
        for path in ("/completion", "/v1/completions"):
            response = client.post(path, content=raw, headers={"Content-Type": "application/json"})
            assert response.status_code == 400, response.text
            error = strict(response.text)["error"]
            assert error["code"] == 400 and error["type"] == "invalid_request_error"
        # Nothing was kept: /slots stays valid JSON.
        strict(client.get("/slots").text)


def test_sampling_reads_an_overflowing_integer_as_a_refusal() -> None:
    from mlxd.engine.sampling.request import read_number
    from mlxd.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="overflow"):
        read_number({"temperature": 10 ** 400}, ("temperature",), 0.8, is_int=False)
    with pytest.raises(InvalidRequest, match="overflow"):
        read_number({"temperature": math.inf}, ("temperature",), 0.8, is_int=False)
    with pytest.raises(InvalidRequest, match="overflow"):
        read_number({"n_predict": -math.inf}, ("n_predict",), 8, is_int=True)
