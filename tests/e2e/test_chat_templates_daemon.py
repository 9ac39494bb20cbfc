"""Built-in template names and --no-jinja through a real mlxd-server (as llama.cpp's own suite starts it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.e2e.conftest import RunningServer

MESSAGES = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "Hi there"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


def test_no_jinja_serves_a_builtin_name(start_server: Callable[..., RunningServer]) -> None:
    server = start_server("--no-jinja", "--chat-template", "command-r", "--verbose")
    with server.client() as client:
        applied = client.post("/apply-template", json={"messages": MESSAGES})
        assert applied.status_code == 200, applied.text
        assert applied.json()["prompt"] == (
            "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>"
            "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
            "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")
        chat = client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4})
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["role"] == "assistant"
        # --verbose: the answer carries b10621's "__verbose" object, with the prompt as the model read it.
        assert chat.json()["__verbose"]["prompt"].endswith("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")
        refused = client.post("/v1/chat/completions", json={"messages": MESSAGES, "tools": [TOOL]})
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == "tools param requires --jinja flag"


def test_builtin_name_under_jinja_and_the_checkpoints_template_under_no_jinja(
        start_server: Callable[..., RunningServer]) -> None:
    named = start_server("--chat-template", "llama3")
    with named.client() as client:
        prompt = client.post("/apply-template", json={"messages": MESSAGES}).json()["prompt"]
    assert prompt == ("<|start_header_id|>system<|end_header_id|>\n\nYou are a test.<|eot_id|>"
                      "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n")
    # The synthetic checkpoint's own template is ChatML: --no-jinja detects it as libllama does.
    plain = start_server("--no-jinja")
    with plain.client() as client:
        prompt = client.post("/apply-template", json={"messages": MESSAGES}).json()["prompt"]
    assert prompt == "<|im_start|>system\nYou are a test.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n" \
                     "<|im_start|>assistant\n"


def test_a_template_that_raises_is_a_400_naming_it(start_server: Callable[..., RunningServer]) -> None:
    path = Path(__file__).parents[1] / "fixtures" / "templates" / "google-gemma-2-2b-it.jinja"
    server = start_server("--chat-template-file", str(path))
    two_users = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with server.client() as client:
        for route in ("/apply-template", "/v1/chat/completions"):
            response = client.post(route, json={"messages": two_users, "max_tokens": 2})
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and error["code"] == 400
            assert error["message"] == ("Jinja Exception: Conversation roles must alternate user/assistant/user/"
                                        f"assistant/... (chat template: --chat-template-file {path})")
        # Nothing of the refused request stays behind: the next one is served.
        assert client.post("/v1/chat/completions", json={"messages": two_users[:1], "max_tokens": 2}).status_code == 200
