"""Reasoning budgets, ``/v1/chat/completions/control`` (``reasoning_end``) and ``return_progress`` over HTTP.

The app is served in this process over the tiny checkpoint with a chat template that opens ``<think>`` in its
generation prompt, as reasoning models' templates do: the answer starts inside reasoning.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxd.api.state import ServingState
from mlxd.config import Config
from mlxd.engine.chat.templates import ChatTemplate
from tests.e2e.api_harness import AppServer, served_model
from tests.e2e.sse_frames import frames, payloads

THINKING_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}"
)
CONFIG: dict[str, Any] = {"parallel": 2}
CHAT = {"messages": [{"role": "user", "content": "Why is the sky blue?"}], "temperature": 0}


@pytest.fixture(scope="module")
def app_server(tiny_model: Any) -> Iterator[AppServer]:
    # The checkpoint's whole context in each slot: a generation without a limit runs for thousands of tokens,
    # long enough to be acted on while it runs.
    CONFIG["ctx_size"] = 2 * int(tiny_model.n_ctx_train)
    served = served_model(tiny_model, parallel=2, ctx_size=CONFIG["ctx_size"])
    served.chat_template = ChatTemplate(THINKING_TEMPLATE)
    server = AppServer(ServingState(config=Config(**CONFIG), model=served))
    yield server
    server.stop()
    served.worker.stop()


@pytest.fixture
def client(app_server: AppServer) -> Iterator[httpx.Client]:
    app_server.state.config = Config(**CONFIG)
    with httpx.Client(base_url=app_server.base_url, timeout=60) as c:
        yield c
    app_server.state.config = Config(**CONFIG)


def chat(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    response = client.post("/v1/chat/completions", json={**CHAT, **fields})
    assert response.status_code == 200, response.text
    message: dict[str, Any] = response.json()["choices"][0]["message"]
    return message


def test_request_budget_forces_the_end_of_reasoning(client: httpx.Client) -> None:
    free = chat(client, max_tokens=12)
    assert "Enough" not in (free.get("reasoning_content") or "")
    assert not free.get("content")  # without a budget the tiny model never closes its reasoning
    budgeted = chat(client, max_tokens=12, reasoning_budget_tokens=3, reasoning_budget_message=" Enough.")
    assert budgeted["reasoning_content"].endswith("Enough.")
    assert budgeted["content"]  # the answer goes on after the forced </think>


def test_server_budget_and_message_apply_unless_the_request_sets_its_own(app_server: AppServer,
                                                                         client: httpx.Client) -> None:
    app_server.state.config = Config(**CONFIG, reasoning_budget=0, reasoning_budget_message="Stop.")
    assert chat(client, max_tokens=8)["reasoning_content"] == "Stop."
    own = chat(client, max_tokens=8, reasoning_budget_tokens=2, reasoning_budget_message="Mine.")
    assert own["reasoning_content"].endswith("Mine.") and own["reasoning_content"] != "Mine."
    alias = chat(client, max_tokens=8, thinking_budget_tokens=2)
    assert alias["reasoning_content"].endswith("Stop.") and alias["reasoning_content"] != "Stop."


def test_native_budget_needs_both_tags(client: httpx.Client) -> None:
    base = {"prompt": "Question: why?\n<think>\n", "n_predict": 8, "temperature": 0}
    fields = {"reasoning_budget_tokens": 0, "reasoning_budget_message": "M", "generation_prompt": "<think>\n",
              "reasoning_budget_start_tag": "<think>", "reasoning_budget_end_tags": ["</think>"]}
    forced = client.post("/completion", json={**base, **fields}).json()
    assert forced["content"].startswith("M</think>")
    untagged = {k: v for k, v in fields.items() if not k.startswith("reasoning_budget_") or k.endswith("tokens")}
    free = client.post("/completion", json=base).json()
    assert client.post("/completion", json={**base, **untagged}).json()["content"] == free["content"]


@pytest.mark.parametrize("field,value,message", [
    ("reasoning_budget_tokens", -2, "Value must be between -1 <= value <= 2147483647, but got -2"),
    ("reasoning_budget_end_tags", "</think>", "type must be array, but is string"),
    ("reasoning_control", "yes", "type must be boolean, but is string"),
])
def test_budget_fields_refuse_wrong_values(client: httpx.Client, field: str, value: Any, message: str) -> None:
    response = client.post("/completion", json={"prompt": "a", "n_predict": 1, field: value})
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]


def _control(client: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return client.post("/v1/chat/completions/control", json=body)


def _chunks(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data: {"):
            yield json.loads(line[len("data: "):])


def test_reasoning_end_stops_a_running_completions_reasoning(client: httpx.Client) -> None:
    body = {**CHAT, "stream": True, "reasoning_control": True, "reasoning_budget_message": " Answer:"}
    reasoning, content, answer = [], [], None
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        for chunk in _chunks(response):
            delta = chunk["choices"][0]["delta"] if chunk.get("choices") else {}
            if delta.get("reasoning_content"):
                reasoning.append(delta["reasoning_content"])
                if len(reasoning) == 3:
                    answer = _control(client, {"id": chunk["id"], "action": "reasoning_end"})
            if delta.get("content"):
                content.append(delta["content"])
                if len(content) == 3:
                    break  # leaving the stream cancels the rest of the generation
    assert answer is not None and answer.status_code == 200 and answer.json() == {"success": True}
    assert "".join(reasoning).endswith("Answer:") and content  # reasoning ended on demand, the answer followed


def test_control_answers(client: httpx.Client) -> None:
    unknown = _control(client, {"id": "chatcmpl-none", "action": "reasoning_end"})
    assert unknown.status_code == 200
    assert unknown.json() == {"success": False, "message": "no active completion for this id"}
    missing = _control(client, {"action": "reasoning_end"})
    assert missing.status_code == 400 and missing.json()["error"]["message"] == "missing completion id"
    bad = _control(client, {"id": "chatcmpl-none", "action": "pause"})
    assert bad.status_code == 400 and bad.json()["error"]["message"] == "unknown control action"
    with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as response:
        chunks = _chunks(response)  # kept alive: closing it would close the stream and end the completion
        completion_id = next(chunks)["id"]
        answer = _control(client, {"id": completion_id, "action": "reasoning_end"})
    assert answer.json() == {"success": False, "message": "reasoning control not enabled for this completion"}


def test_return_progress_on_native_stream(client: httpx.Client) -> None:
    body = {"prompt": "The quick brown fox " * 20, "n_predict": 2, "stream": True, "return_progress": True}
    first = payloads(client.post("/completion", json=body).text)
    progress = [p for p in first if "prompt_progress" in p]
    assert progress and progress[0] is first[0]
    last = progress[-1]
    assert last["content"] == "" and last["tokens"] == [] and last["stop"] is False
    assert set(last["prompt_progress"]) == {"total", "cache", "processed", "time_ms"}
    assert last["prompt_progress"]["processed"] == last["prompt_progress"]["total"] == last["tokens_evaluated"]
    again = [p for p in payloads(client.post("/completion", json=body).text) if "prompt_progress" in p]
    assert again[-1]["prompt_progress"]["cache"] > 0  # the same prompt again comes from the prompt cache
    plain = payloads(client.post("/completion", json={**body, "return_progress": False}).text)
    assert not any("prompt_progress" in p for p in plain)


def test_return_progress_on_chat_and_text_streams(client: httpx.Client) -> None:
    chunks = payloads(client.post("/v1/chat/completions",
                                  json={**CHAT, "stream": True, "max_tokens": 2, "return_progress": True}).text)
    first = chunks[0]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": None}
    # As b10621: a first report before any batch (only the cached tokens in the slot), then one per batch.
    assert first["prompt_progress"]["processed"] == first["prompt_progress"]["cache"]
    reports = [c["prompt_progress"] for c in chunks if "prompt_progress" in c]
    assert len(reports) >= 2 and reports[-1]["processed"] == reports[-1]["total"]
    text = payloads(client.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 2, "stream": True,
                                                         "return_progress": True}).text)
    assert text[0]["choices"][0]["text"] == "" and "prompt_progress" in text[0]
    infill = payloads(client.post("/infill", json={"input_prefix": "def f(", "input_suffix": ")", "n_predict": 2,
                                                   "stream": True, "return_progress": True}).text)
    assert infill[0]["content"] == "" and "prompt_progress" in infill[0]
    events = frames(client.post("/v1/responses", json={"input": "hi", "max_output_tokens": 2, "stream": True,
                                                       "return_progress": True}).text)
    progress = [json.loads(d) for name, d in events if name == "response.in_progress" and "prompt_progress" in d]
    assert progress and progress[-1]["prompt_progress"]["processed"] == progress[-1]["prompt_progress"]["total"]


def test_reasoning_budget_options_reach_a_daemons_chat_requests(start_server, tmp_path: Path) -> None:
    template = tmp_path / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE)
    server = start_server("--chat-template-file", str(template), "--reasoning-budget", "0",
                          "--reasoning-budget-message", "Stop.")
    with server.client() as c:
        assert chat(c, max_tokens=8)["reasoning_content"] == "Stop."
        assert chat(c, max_tokens=8, reasoning_budget_tokens=1)["reasoning_content"].endswith("Stop.")
