"""``/embedding(s)``, ``/v1/embeddings`` and the rerank routes: a real ``mlxd-server --embeddings`` on 127.0.0.1,
and the app in this process for the option variants (it reads the configuration per request).

b10621's captures hold only the refusals (its server ran without the mode); the served shapes are upstream's
``server_task_result_embd::to_json_non_oaicompat`` and ``format_embeddings_response_oaicompat``.
"""

from __future__ import annotations

import base64
import struct
from pathlib import Path
from typing import Any, Iterator

import httpx
import numpy as np
import pytest
from openai import OpenAI

from mlxd.api.state import ServingState
from mlxd.config import Config
from tests.e2e.api_harness import AppServer, served_model
from tests.e2e.captures import key_set, load
from tests.e2e.conftest import RunningServer, launch
from tests.engine.test_embed import link_as_reranker

NATIVE_KEYS = {"[].index", "[].embedding"}
OAI_KEYS = {"model", "object", "usage", "usage.prompt_tokens", "usage.total_tokens", "data", "data[].embedding",
            "data[].index", "data[].object"}
JINA_KEYS = {"model", "object", "usage", "usage.prompt_tokens", "usage.total_tokens", "results", "results[].index",
             "results[].relevance_score"}
OFF_CAPTURES = {"/embedding": "post_embedding", "/embeddings": "post_embedding", "/v1/embeddings": "post_v1_embeddings",
                "/rerank": "post_rerank", "/reranking": "post_rerank", "/v1/rerank": "post_rerank",
                "/v1/reranking": "post_rerank"}


@pytest.fixture(scope="module")
def embedding_server(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """``mlxd-server --embeddings --pooling mean --metrics`` over the tiny checkpoint."""
    log_path = tmp_path_factory.mktemp("embeddings") / "mlxd.log"
    running = launch(["-m", str(tiny_checkpoint), "--embeddings", "--pooling", "mean", "--metrics", "--host",
                      "127.0.0.1", "--port", "0"], log_path)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def http(embedding_server: RunningServer) -> Iterator[httpx.Client]:
    with embedding_server.client() as client:
        yield client


@pytest.fixture(scope="module")
def reranker(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """``mlxd-server --reranking`` over the tiny checkpoint named as a Qwen3 reranker."""
    root = tmp_path_factory.mktemp("reranker")
    model = link_as_reranker(tiny_checkpoint, root / "qwen3-reranker-tiny")
    running = launch(["-m", str(model), "--reranking", "--host", "127.0.0.1", "--port", "0"], root / "mlxd.log")
    with running.client() as client:
        yield client
    running.stop()


@pytest.fixture(scope="module")
def app(tiny_model: Any) -> Iterator[AppServer]:
    served = served_model(tiny_model)
    server = AppServer(ServingState(config=Config(), model=served))
    yield server
    server.stop()
    served.worker.stop()


def _post(app: AppServer, config: Config, path: str, body: Any) -> httpx.Response:
    app.state.config = config
    with httpx.Client(base_url=app.base_url, timeout=60) as client:
        return client.post(path, json=body)


def test_native_route_answers_one_pooled_unit_vector_per_input(http: httpx.Client) -> None:
    one = http.post("/embedding", json={"content": "hello"})
    assert one.status_code == 200 and key_set(one.json()) == NATIVE_KEYS
    [entry] = one.json()
    assert entry["index"] == 0 and len(entry["embedding"]) == 1
    assert np.linalg.norm(entry["embedding"][0]) == pytest.approx(1.0, abs=1e-5)
    many = http.post("/embeddings", json={"input": ["hello", "a b c", [5, 6, 7]]}).json()
    assert [e["index"] for e in many] == [0, 1, 2]
    np.testing.assert_allclose(many[0]["embedding"], entry["embedding"], rtol=1e-5, atol=1e-6)


def test_openai_route_shape_usage_and_base64(http: httpx.Client) -> None:
    texts = ["hello", "the quick brown fox"]
    floats = http.post("/v1/embeddings", json={"input": texts, "model": "anything"})
    assert floats.status_code == 200 and key_set(floats.json()) == OAI_KEYS
    body = floats.json()
    assert body["object"] == "list" and body["model"] == "anything"
    assert [(d["index"], d["object"]) for d in body["data"]] == [(0, "embedding"), (1, "embedding")]
    n_tokens = sum(len(http.post("/tokenize", json={"content": t, "add_special": True}).json()["tokens"])
                   for t in texts)
    assert body["usage"] == {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
    native = http.post("/embedding", json={"content": texts}).json()
    for d, n in zip(body["data"], native):
        np.testing.assert_allclose(d["embedding"], n["embedding"][0], rtol=1e-6)
    encoded = http.post("/v1/embeddings", json={"input": texts, "encoding_format": "base64"}).json()
    assert key_set(encoded) == OAI_KEYS | {"data[].encoding_format"}
    for d, f in zip(encoded["data"], body["data"]):
        raw = base64.b64decode(d["embedding"])
        assert d["encoding_format"] == "base64"
        np.testing.assert_allclose(struct.unpack(f"<{len(raw) // 4}f", raw), f["embedding"], rtol=1e-6)


def test_openai_client_embeddings_create(embedding_server: RunningServer, http: httpx.Client) -> None:
    client = OpenAI(base_url=f"{embedding_server.base_url}/v1", api_key="none")
    out = client.embeddings.create(model="tiny", input=["hello", "a b c"])  # the client asks for base64
    floats = http.post("/v1/embeddings", json={"input": ["hello", "a b c"]}).json()["data"]
    assert [d.index for d in out.data] == [0, 1] and out.usage.prompt_tokens > 0
    for got, want in zip(out.data, floats):
        np.testing.assert_allclose(got.embedding, want["embedding"], rtol=1e-6)


def test_completions_are_still_served_in_embedding_mode(http: httpx.Client) -> None:
    # b10621 switches its context's embedding output per batch; only the --help text speaks of a restriction.
    assert http.post("/completion", json={"prompt": "Once", "n_predict": 2}).status_code == 200
    chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert chat.status_code == 200


def test_rerank_without_rank_pooling_is_refused_as_upstream(http: httpx.Client) -> None:
    cap = load("post_rerank")
    response = http.post("/rerank", content=cap.request_body, headers={"Content-Type": "application/json"})
    assert response.status_code == cap.status and response.json() == cap.json()


def test_reranking_without_a_classification_head_stops_startup(start_server: Any) -> None:
    with pytest.raises(RuntimeError, match=r"--reranking needs a model with a classification \(rank\) head"):
        start_server("--reranking")


@pytest.mark.parametrize("path", sorted(OFF_CAPTURES))
def test_routes_refuse_as_upstream_without_the_mode(app: AppServer, path: str) -> None:
    cap = load(OFF_CAPTURES[path])
    response = _post(app, Config(), path, {"content": "hello", "input": "hello", "query": "q", "documents": ["a"]})
    assert response.status_code == cap.status and response.json() == cap.json()


def test_pooling_none_gives_token_rows_and_no_openai_shape(app: AppServer, tiny_model: Any) -> None:
    config = Config(embeddings=True)  # the tiny causal LM declares no pooling: llama.cpp's default is none
    tokens = tiny_model.tokenizer.encode("the quick brown fox")
    [entry] = _post(app, config, "/embedding", {"content": "the quick brown fox"}).json()
    assert len(entry["embedding"]) == len(tokens)
    assert all(np.linalg.norm(row) > 1.5 for row in entry["embedding"])  # never normalised
    refused = _post(app, config, "/v1/embeddings", {"input": "hello"})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == ("Pooling type 'none' is not OAI compatible. Please use a "
                                                  "different pooling type")


def test_normalisation_from_the_option_and_the_request(app: AppServer) -> None:
    def vector(config: Config, **extra: Any) -> np.ndarray:
        return np.array(_post(app, config, "/embedding", {"content": "hello", **extra}).json()[0]["embedding"][0])

    raw = vector(Config(embeddings=True, pooling="last", embd_normalize=-1))
    np.testing.assert_allclose(vector(Config(embeddings=True, pooling="last", embd_normalize=1)),
                               raw / np.abs(raw).sum(), rtol=1e-5)
    np.testing.assert_allclose(vector(Config(embeddings=True, pooling="last"), embd_normalize=0),
                               raw * 32760 / np.abs(raw).max(), rtol=1e-5)


@pytest.mark.parametrize("body,message", [
    ({}, "\"input\" or \"content\" must be provided"),
    ({"input": ""}, "Input content cannot be empty"),
    ({"input": "x", "encoding_format": "hex"}, "The format to return the embeddings in. Can be either float or "
                                               "base64"),
    ({"input": "x", "embd_normalize": "2"}, "\"embd_normalize\" must be an integer"),
])
def test_bad_requests_are_400(app: AppServer, body: dict[str, Any], message: str) -> None:
    response = _post(app, Config(embeddings=True, pooling="mean"), "/v1/embeddings", body)
    assert response.status_code == 400 and response.json()["error"]["message"] == message


def test_reranking_switched_on_later_is_refused_naming_the_missing_head(app: AppServer) -> None:
    response = _post(app, Config(reranking=True), "/v1/rerank", {"query": "q", "documents": ["a", "b"]})
    assert response.status_code == 501
    assert "needs a model with a classification (rank) head" in response.json()["error"]["message"]


DOCUMENTS = ["a panda is a bear", "the stock market fell", "pandas eat bamboo", "rain tomorrow"]


def test_rerank_scores_sorted_and_cut_to_top_n(reranker: httpx.Client) -> None:
    response = reranker.post("/rerank", json={"query": "what do pandas eat?", "documents": DOCUMENTS})
    assert response.status_code == 200 and key_set(response.json()) == JINA_KEYS
    results = response.json()["results"]
    scores = [r["relevance_score"] for r in results]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3] and scores == sorted(scores, reverse=True)
    assert all(0.0 < s < 1.0 for s in scores)  # the softmax of the yes/no logits
    for r in results:  # a document's score does not depend on the others it is batched with
        [alone] = reranker.post("/v1/rerank", json={"query": "what do pandas eat?",
                                                    "documents": [DOCUMENTS[r["index"]]]}).json()["results"]
        assert alone["relevance_score"] == pytest.approx(r["relevance_score"], rel=1e-4)
    top = reranker.post("/reranking", json={"query": "what do pandas eat?", "documents": DOCUMENTS, "top_n": 2})
    assert top.json()["results"] == results[:2]


def test_rerank_tei_shape(reranker: httpx.Client) -> None:
    response = reranker.post("/v1/reranking", json={"query": "pandas", "texts": DOCUMENTS, "return_text": True})
    assert response.status_code == 200
    entries = response.json()
    assert isinstance(entries, list) and key_set(entries) == {"[].index", "[].score", "[].text"}
    assert all(e["text"] == DOCUMENTS[e["index"]] for e in entries)


@pytest.mark.parametrize("body,message", [
    ({"documents": ["a"]}, "\"query\" must be provided"),
    ({"query": 3, "documents": ["a"]}, "\"query\" must be a string"),
    ({"query": "q", "documents": []}, "\"documents\" must be a non-empty string array"),
])
def test_rerank_bad_requests_are_400(reranker: httpx.Client, body: dict[str, Any], message: str) -> None:
    response = reranker.post("/rerank", json=body)
    assert response.status_code == 400 and response.json()["error"]["message"] == message


def test_embeddings_of_a_reranker_are_refused(reranker: httpx.Client) -> None:
    response = reranker.post("/embedding", json={"content": "hello"})
    assert response.status_code == 501 and "use /rerank" in response.json()["error"]["message"]


def _metric(text: str, name: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith(f"llamacpp:{name} ")]
    return float(line.split(" ", 1)[1])


def test_embedding_prompts_count_as_decodes_on_metrics(http: httpx.Client) -> None:
    # b10621: an embedding never samples a token, but its prompt costs a decode and counts as processed.
    before = http.get("/metrics").text
    inputs = ["hello world", "goodbye world"]
    response = http.post("/v1/embeddings", json={"input": inputs})
    assert response.status_code == 200
    after = http.get("/metrics").text
    n_tokens = response.json()["usage"]["prompt_tokens"]
    assert _metric(after, "prompt_tokens_total") - _metric(before, "prompt_tokens_total") == n_tokens
    assert _metric(after, "n_decode_total") > _metric(before, "n_decode_total")
    assert _metric(after, "tokens_predicted_total") == _metric(before, "tokens_predicted_total")
    assert 1 <= _metric(after, "n_busy_slots_per_decode")
