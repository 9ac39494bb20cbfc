"""The native completion routes and the captures of every generation route, served over HTTP on 127.0.0.1.

The app runs with the slots and context the captures were taken with (``-np 2 -c 512``), so slot counts and
context sizes behave alike; each captured request is replayed and must answer the same status and the same JSON
key set, recursively (for streams: the first partial, the final frame and the ``[DONE]`` terminator).
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any, Iterator

import httpx
import pytest

from mlxd.config import Config
from tests.e2e.api_harness import AppServer, serving_in_process
from tests.e2e.captures import key_set, load
from tests.e2e.sse_frames import frames, payloads

# Every capture of a generation route. post_infill is not here: the synthetic checkpoint's vocabulary has FIM
# markers, so mlxd serves it (tests below), where the captured model had none and was refused.
GENERATION_CAPTURES = [
    "post_completion", "post_completion_probs", "post_completion_stream", "post_completion_tokens_prompt",
    "post_completions", "post_v1_completions", "post_v1_completions_stream", "post_v1_chat_completions",
    "post_v1_chat_completions_stream", "post_v1_chat_completions_stream_usage", "post_chat_completions_logprobs",
    "post_embedding", "post_v1_embeddings", "post_rerank", "err_chat_bad_role", "err_chat_no_messages",
    "err_missing_prompt", "err_n_predict_string", "err_prompt_exceeds_context", "err_v1_completions_missing_prompt",
]
# Refusals whose wording mlxd reproduces word for word.
SAME_MESSAGE = {"post_embedding", "post_v1_embeddings", "post_rerank", "err_chat_no_messages", "err_missing_prompt",
                "err_n_predict_string", "err_v1_completions_missing_prompt"}


@pytest.fixture(scope="module")
def app_server(tiny_model: Any) -> Iterator[AppServer]:
    with serving_in_process(tiny_model, ctx_size=512) as server:
        yield server


@pytest.fixture(scope="module")
def client(app_server: AppServer) -> Iterator[httpx.Client]:
    with app_server.client() as c:
        yield c


def _stream_shape(text: str) -> tuple[set[str], set[str], bool]:
    data = payloads(text)
    done = any(d == "[DONE]" for _, d in frames(text))
    return key_set(data[0]), key_set(data[-1]), done


@pytest.mark.parametrize("name", GENERATION_CAPTURES)
def test_capture_status_and_keys(client: httpx.Client, name: str) -> None:
    cap = load(name)
    response = client.request(cap.method, cap.path, content=cap.request_body,
                              headers={"Content-Type": "application/json"})
    assert response.status_code == cap.status, response.text
    if cap.headers.get("content-type", "").startswith("text/event-stream"):
        assert response.headers["content-type"].startswith("text/event-stream")
        assert _stream_shape(response.text) == _stream_shape(cap.body.decode())
        return
    assert key_set(response.json()) == key_set(cap.json())
    if name in SAME_MESSAGE:
        assert response.json()["error"]["message"] == cap.json()["error"]["message"]


def test_prompt_too_long_carries_both_sizes(client: httpx.Client) -> None:
    response = client.post("/completion", json={"prompt": "Once upon a time " * 400, "n_predict": 4})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "exceed_context_size_error"
    assert error["n_ctx"] == 256 and error["n_prompt_tokens"] > 256
    assert error["message"] == (f"request ({error['n_prompt_tokens']} tokens) exceeds the available context size "
                                "(256 tokens), try increasing it")


def test_stream_ends_with_final_object_and_no_done(client: httpx.Client) -> None:
    response = client.post("/completion", json={"prompt": "Once", "n_predict": 4, "stream": True, "seed": 3})
    data = [d for _, d in frames(response.text)]
    assert "[DONE]" not in data
    final = json.loads(data[-1])
    assert final["stop"] is True and final["content"] == "" and "generation_settings" in final


@pytest.mark.parametrize("path,text_of", [
    ("/completion", lambda o: o["content"]),
    ("/v1/completions", lambda o: o["choices"][0]["text"] if o["choices"] else ""),
])
def test_stream_deltas_equal_whole_answer(client: httpx.Client, path: str, text_of) -> None:
    body = {"prompt": "The quick brown fox", "n_predict": 24, "temperature": 0.9, "seed": 1234}
    whole = text_of(client.post(path, json=body).json())
    streamed = client.post(path, json={**body, "stream": True})
    assert "".join(text_of(p) for p in payloads(streamed.text)) == whole
    assert whole


def test_probabilities_and_tokens(client: httpx.Client) -> None:
    out = client.post("/completion", json={"prompt": "Once", "n_predict": 3, "temperature": 0, "n_probs": 2,
                                           "return_tokens": True}).json()
    assert len(out["tokens"]) == 3 == len(out["completion_probabilities"])
    first = out["completion_probabilities"][0]
    assert first["id"] == out["tokens"][0] and len(first["top_logprobs"]) == 2
    post = client.post("/completion", json={"prompt": "Once", "n_predict": 2, "temperature": 0, "n_probs": 2,
                                            "post_sampling_probs": True}).json()
    assert set(post["completion_probabilities"][0]) == {"id", "token", "bytes", "prob", "top_probs"}


def test_response_fields_projection(client: httpx.Client) -> None:
    out = client.post("/completion", json={"prompt": "Once", "n_predict": 2,
                                           "response_fields": ["content", "generation_settings/n_predict", "nope"]})
    assert set(out.json()) == {"content", "generation_settings/n_predict"}
    assert out.json()["generation_settings/n_predict"] == 2


def test_prompt_forms(client: httpx.Client) -> None:
    tokens = client.post("/tokenize", json={"content": "Once upon"}).json()["tokens"]
    by_text = client.post("/completion", json={"prompt": "Once upon", "n_predict": 3, "temperature": 0}).json()
    by_ids = client.post("/completion", json={"prompt": tokens, "n_predict": 3, "temperature": 0}).json()
    assert by_ids["content"] == by_text["content"]
    mixed = client.post("/completion", json={"prompt": ["Once", tokens[-1]], "n_predict": 2}).json()
    assert mixed["stop"] is True
    several = client.post("/completion", json={"prompt": ["Once", "upon"], "n_predict": 2})
    assert [r["index"] for r in several.json()] == [0, 1]
    oai = client.post("/v1/completions", json={"prompt": ["Once", "upon"], "max_tokens": 2}).json()
    assert [c["index"] for c in oai["choices"]] == [0, 1]


def test_n_cmpl_bounded_by_slots(client: httpx.Client) -> None:
    refused = client.post("/completion", json={"prompt": "Once", "n_predict": 2, "n": 3})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "Field 'n': Value must be between 1 <= value <= 2, but got 3"
    two = client.post("/v1/completions", json={"prompt": "Once", "max_tokens": 2, "n": 2}).json()
    assert len(two["choices"]) == 2


@pytest.mark.parametrize("body,message", [
    ({"n_predict": -2}, "Field 'n_predict': Value must be between -1 <= value <= 2147483647, but got -2"),
    ({"stream": 1}, "Field 'stream': [json.exception.type_error.302] type must be boolean, but is number"),
    ({"id_slot": 7}, "Invalid slot ID"),
])
def test_field_refusals(client: httpx.Client, body: dict, message: str) -> None:
    response = client.post("/completion", json={"prompt": "Once", "n_predict": 2, **body})
    assert response.status_code == 400
    assert response.json()["error"] == {"code": 400, "message": message, "type": "invalid_request_error"}


YES_NO = 'root ::= "yes" | "no"'
ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"],
                 "additionalProperties": False}


@pytest.mark.parametrize("path,text_of", [
    ("/completion", lambda o: o["content"]), ("/v1/completions", lambda o: o["choices"][0]["text"]),
])
def test_grammar_and_json_schema_constrain_the_output(client: httpx.Client, path: str, text_of) -> None:
    for seed in (1, 2, 3):
        out = client.post(path, json={"prompt": "Answer:", "n_predict": 8, "seed": seed, "grammar": YES_NO}).json()
        assert text_of(out) in ("yes", "no")
        if path == "/completion":
            assert out["generation_settings"]["grammar"] == YES_NO
        shaped = client.post(path, json={"prompt": "JSON:", "n_predict": 40, "seed": seed,
                                         "json_schema": ANSWER_SCHEMA}).json()
        assert json.loads(text_of(shaped))["answer"] in ("yes", "no")
    streamed = client.post(path, json={"prompt": "Answer:", "n_predict": 8, "grammar": YES_NO, "stream": True})
    assert "".join(text_of(p) for p in payloads(streamed.text) if p.get("choices", [1])) in ("yes", "no")


@pytest.mark.parametrize("body,message", [
    ({"grammar": "root ::= ("}, "grammar: failed to parse grammar"),
    ({"grammar": YES_NO, "grammar_lazy": True}, "Error: no triggers set for lazy grammar!"),
    ({"n_cache_reuse": 64}, "Field 'n_cache_reuse'"),
])
def test_constraints_that_cannot_run_are_refused(client: httpx.Client, body: dict, message: str) -> None:
    for path in ("/completion", "/v1/completions"):
        response = client.post(path, json={"prompt": "Once", "n_predict": 2, **body})
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"]["message"].startswith(message)


def test_infill_with_fim_markers(client: httpx.Client) -> None:
    out = client.post("/infill", json={"input_prefix": "def f(", "input_suffix": ")", "n_predict": 4,
                                       "input_extra": [{"filename": "a.py", "text": "x = 1\n"}]})
    assert out.status_code == 200, out.text
    assert key_set(out.json()) == key_set(load("post_completion").json())
    missing = client.post("/infill", json={"input_suffix": ")"})
    assert missing.status_code == 400
    assert missing.json()["error"]["message"] == "[json.exception.out_of_range.403] key 'input_prefix' not found"


def test_generation_control_of_an_unknown_completion(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions/control", json={"id": "chatcmpl-x", "action": "reasoning_end"})
    assert response.status_code == 200
    assert response.json() == {"success": False, "message": "no active completion for this id"}


@pytest.fixture
def endless_server(tiny_model: Any) -> Iterator[AppServer]:
    """One slot with the checkpoint's whole context: a generation there runs for thousands of tokens."""
    with serving_in_process(tiny_model, parallel=1, ctx_size=int(tiny_model.n_ctx_train),
                            config=Config(parallel=1)) as server:
        yield server


def _tokens_generated(client: httpx.Client, slot: dict[str, Any]) -> int:
    """How many tokens the slot's last request wrote: its text under LLAMA_SERVER_SLOTS_DEBUG, tokenized again (an
    idle slot's ``n_decoded`` is 0, as in b10621)."""
    assert slot["next_token"][0]["n_decoded"] == 0
    return len(client.post("/tokenize", json={"content": slot["generated"]}).json()["tokens"])


def test_disconnect_cancels_and_frees_the_slot(endless_server: AppServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_SERVER_SLOTS_DEBUG", "1")
    n_ctx = endless_server.state.model.worker.n_ctx_slot
    body = {"prompt": "Once upon a time", "n_predict": -1, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=endless_server.base_url, timeout=30) as c:
        with c.stream("POST", "/completion", json=body) as response:
            # Keep the line iterator alive: dropping it closes the response, which is the disconnect itself.
            lines = response.iter_lines()
            for line in lines:
                if line.startswith("data:"):
                    break
            assert json.loads(line[len("data:"):])["stop"] is False, line
            assert any(slot["is_processing"] for slot in c.get("/slots").json())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if not any(slot["is_processing"] for slot in c.get("/slots").json()):
                break
            time.sleep(0.05)
        slots = c.get("/slots").json()
        assert not any(slot["is_processing"] for slot in slots)
        # Cancelled, not run to the end of the context: the slot stopped long before filling it.
        assert 0 < _tokens_generated(c, slots[0]) < n_ctx // 2
        assert slots[0]["params"]["n_predict"] == -1
        assert c.post("/completion", json={"prompt": "Once", "n_predict": 2}).status_code == 200


def test_timings_per_token_and_verbose(client: httpx.Client) -> None:
    body = {"prompt": "Once", "n_predict": 3, "stream": True, "timings_per_token": True}
    partials = payloads(client.post("/completion", json=body).text)[:-1]
    assert partials and all("timings" in p for p in partials)
    plain = payloads(client.post("/completion", json={**body, "timings_per_token": False}).text)[:-1]
    assert not any("timings" in p for p in plain)
    verbose = client.post("/v1/completions", json={"prompt": "Once", "max_tokens": 2, "verbose": True}).json()
    assert verbose["__verbose"]["tokens_predicted"] == 2


def test_cache_prompt_reuses_the_prefix(client: httpx.Client) -> None:
    body = {"prompt": "A long shared prefix for the cache test, once and again", "n_predict": 1, "temperature": 0}
    client.post("/completion", json=body)
    cached = client.post("/completion", json=body).json()
    assert cached["timings"]["cache_n"] > 0
    cold = client.post("/completion", json={**body, "cache_prompt": False}).json()
    assert cold["timings"]["cache_n"] == 0


def test_stop_strings_and_limits(client: httpx.Client) -> None:
    free = client.post("/completion", json={"prompt": "Once", "n_predict": 12, "temperature": 0}).json()
    word = free["content"][3:6]
    stopped = client.post("/completion", json={"prompt": "Once", "n_predict": 12, "temperature": 0,
                                               "stop": [word]}).json()
    assert stopped["stop_type"] == "word" and stopped["stopping_word"] == word
    assert stopped["content"] == free["content"][:free["content"].index(word)]
    assert free["stop_type"] == "limit" and free["tokens_predicted"] == 12


@pytest.mark.parametrize("body,message", [
    ({"echo": True}, "Only no echo is supported"), ({"best_of": 2}, "Unsupported param: best_of"),
    ({"suffix": "x"}, "Unsupported param: suffix"),
])
def test_openai_completion_params_b10621_rejects(client: httpx.Client, body: dict, message: str) -> None:
    response = client.post("/v1/completions", json={"prompt": "Once", "max_tokens": 2, **body})
    assert response.status_code == 400 and response.json()["error"]["message"] == message


def test_disconnect_during_a_whole_answer_cancels_it(endless_server: AppServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_SERVER_SLOTS_DEBUG", "1")
    n_ctx = endless_server.state.model.worker.n_ctx_slot
    body = json.dumps({"prompt": "Once upon a time", "n_predict": -1, "ignore_eos": True}).encode()
    host, port = endless_server.base_url.removeprefix("http://").split(":")
    with httpx.Client(base_url=endless_server.base_url, timeout=30) as c:
        raw = socket.create_connection((host, int(port)))
        raw.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(s["is_processing"] for s in c.get("/slots").json()):
            time.sleep(0.01)
        assert any(s["is_processing"] for s in c.get("/slots").json())
        raw.close()
        while time.monotonic() < deadline and any(s["is_processing"] for s in c.get("/slots").json()):
            time.sleep(0.05)
        slots = c.get("/slots").json()
        assert not slots[0]["is_processing"]
        assert _tokens_generated(c, slots[0]) < n_ctx // 2


def test_generations_are_counted_on_metrics(client: httpx.Client, app_server: AppServer) -> None:
    with app_server.options(parallel=2, ctx_size=512, metrics=True):
        before = client.get("/metrics").text
        client.post("/completion", json={"prompt": "Once", "n_predict": 3})
        client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        after = client.get("/metrics").text

    def value(text: str, name: str) -> float:
        lines = [line for line in text.splitlines() if line.startswith(name + " ") or line.startswith(name + "{")]
        return float(lines[0].rsplit(" ", 1)[1]) if lines else 0.0

    assert value(after, "llamacpp:tokens_predicted_total") - value(before, "llamacpp:tokens_predicted_total") == 5
    # Each request's prompt is one forward pass at least, and each token after its first one more.
    assert value(after, "llamacpp:n_decode_total") - value(before, "llamacpp:n_decode_total") >= 1 + 2 + 1 + 1
    assert value(after, "llamacpp:n_busy_slots_per_decode") >= 1
    assert 'mlxd_requests_total{route="/completion"}' in after
    assert 'mlxd_requests_total{route="/v1/chat/completions"}' in after


def test_ignore_eos_shows_the_end_of_generation_bans_in_generation_settings(client: httpx.Client,
                                                                            app_server: AppServer) -> None:
    # upstream test_ignore_eos.py: b10621 adds a -inf bias (JSON null) per end-of-generation token to logit_bias.
    eog = sorted(app_server.state.model.loaded.eos_token_ids)
    body = {"prompt": "Once upon a time", "n_predict": 4, "temperature": 0, "logit_bias": [[11, 0.5]]}
    banned = client.post("/completion", json={**body, "ignore_eos": True}).json()["generation_settings"]
    assert banned["ignore_eos"] is True
    assert banned["logit_bias"] == [{"bias": 0.5, "token": 11}] + [{"bias": None, "token": t} for t in eog]
    plain = client.post("/completion", json={**body, "ignore_eos": False}).json()["generation_settings"]
    assert plain["logit_bias"] == [{"bias": 0.5, "token": 11}]


def test_object_prompts_are_their_prompt_string(client: httpx.Client) -> None:
    # upstream test_completion.py: {"prompt_string": ...} is a text prompt; multimodal_data needs a media model.
    greedy = {"n_predict": 4, "temperature": 0}
    text = client.post("/completion", json={**greedy, "prompt": "I believe"}).json()["content"]
    alone = client.post("/completion", json={**greedy, "prompt": {"prompt_string": "I believe"}})
    assert alone.status_code == 200 and alone.json()["content"] == text
    tokens = client.post("/tokenize", json={"content": "I believe", "add_special": True}).json()["tokens"]
    mixed = client.post("/completion", json={**greedy, "prompt": [tokens, {"prompt_string": "I believe"}]})
    assert [r["content"] for r in mixed.json()] == [text, text]
    media = client.post("/completion", json={**greedy, "prompt": {"prompt_string": "x", "multimodal_data": ["AA=="]}})
    assert media.status_code == 400  # b10621: "Multimodal data provided, but model does not support ..."
    assert media.json()["error"]["message"].startswith("Multimodal data provided")
    for bad in ({"text": "x"}, {"prompt_string": 3}, [{"prompt_string": None}]):
        refused = client.post("/completion", json={**greedy, "prompt": bad})
        assert refused.status_code == 400 and refused.json()["error"]["type"] == "invalid_request_error"


def test_generation_rates_leave_out_the_first_token(client: httpx.Client) -> None:
    # upstream test_metrics.py: the first token comes from the prompt's last batch, so the rates are over n - 1 steps.
    one = client.post("/completion", json={"prompt": "I believe", "n_predict": 1}).json()["timings"]
    assert (one["predicted_n"], one["predicted_per_second"], one["predicted_per_token_ms"]) == (1, 0.0, 0.0)
    many = client.post("/completion", json={"prompt": "I believe", "n_predict": 16, "ignore_eos": True}).json()
    t = many["timings"]
    assert t["predicted_n"] == 16
    assert abs(t["predicted_per_second"] - 1e3 / t["predicted_ms"] * 15) < 1e-6
    assert abs(t["predicted_per_token_ms"] - t["predicted_ms"] / 15) < 1e-9


def test_prompt_progress_starts_at_the_cache_and_carries_timings(client: httpx.Client) -> None:
    # upstream test_metrics.py: the first update comes before any prompt token is computed, and with
    # timings_per_token each update has timings that never go back.
    body = {"prompt": "the quick brown fox jumps over the lazy dog " * 8, "n_predict": 2, "stream": True,
            "return_progress": True, "timings_per_token": True, "cache_prompt": False}
    progress = [p for p in payloads(client.post("/completion", json=body).text) if "prompt_progress" in p]
    assert len(progress) > 1
    first = progress[0]
    assert first["prompt_progress"]["processed"] == first["prompt_progress"]["cache"] == 0
    assert (first["timings"]["prompt_n"], first["timings"]["prompt_ms"], first["timings"]["predicted_n"]) == (0, 0.0, 0)
    times = [p["timings"]["prompt_ms"] for p in progress]
    assert times == sorted(times) and times[-1] > 0
    assert all(v is not None and v >= 0 for p in progress for v in p["timings"].values())
    assert progress[-1]["timings"]["prompt_n"] == progress[-1]["prompt_progress"]["total"]
