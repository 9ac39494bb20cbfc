"""A llama-vocabulary checkpoint (the maker's ``tiny-llama``) served as llama.cpp's server tests expect of one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# A paragraph of prose: some 290 pieces of the 512-piece vocabulary, more than a 256-token slot holds.
PROSE = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore "
    "magna aliqua.\nUt enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea "
    "commodo consequat.\nDuis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat "
    "nulla pariatur.\nExcepteur sint occaecat cupidatat non proident, sunt in culpa qui officia deserunt mollit "
    "anim id est laborum."
)


def test_bos_is_one_and_the_prompt_echo_starts_with_it(start_server: Any, tiny_llama_checkpoint: Path) -> None:
    # upstream test_tokenize.py::test_tokenize_with_bos, test_completion.py::test_completion_response_fields
    server = start_server("-m", str(tiny_llama_checkpoint), "-c", "512", "-np", "2")
    with server.client() as client:
        text = "What is the capital of France ?"
        with_bos = client.post("/tokenize", json={"content": text, "add_special": True}).json()["tokens"]
        plain = client.post("/tokenize", json={"content": text}).json()["tokens"]
        assert with_bos[0] == 1 and with_bos[1:] == plain and 1 not in plain
        assert client.post("/detokenize", json={"tokens": plain}).json()["content"].strip() == text
        res = client.post("/completion", json={"prompt": "I believe the meaning of life is", "n_predict": 8,
                                               "response_fields": ["content", "prompt"]})
        assert res.status_code == 200
        assert res.json()["prompt"] == "<s> I believe the meaning of life is"
        assert set(res.json()) == {"content", "prompt"} and res.json()["content"]
        # Bytes outside the trained pieces go through the byte-fallback pieces and come back whole.
        emoji = "unicode 媽 and emoji 🤗"
        pieces = client.post("/tokenize", json={"content": emoji, "with_pieces": True}).json()["tokens"]
        assert any(isinstance(p["piece"], list) for p in pieces)  # a lone UTF-8 byte is shown as its bytes
        ids = [p["id"] for p in pieces]
        assert client.post("/detokenize", json={"tokens": ids}).json()["content"].strip() == emoji


def test_a_paragraph_exceeds_a_256_token_slot(start_server: Any, tiny_llama_checkpoint: Path) -> None:
    # upstream test_ctx_shift.py::test_ctx_shift_disabled_long_prompt: 512 tokens over 2 slots, no context shift
    server = start_server("-m", str(tiny_llama_checkpoint), "-c", "512", "-np", "2")
    with server.client() as client:
        n = len(client.post("/tokenize", json={"content": PROSE, "add_special": True}).json()["tokens"])
        assert n > 256
        res = client.post("/completion", json={"prompt": PROSE, "n_predict": 64})
        assert res.status_code == 400
        assert "exceeds the available context size" in res.json()["error"]["message"]
        short = client.post("/completion", json={"prompt": "Hi how are you", "n_predict": 16})
        assert short.status_code == 200 and short.json()["timings"]["predicted_n"] == 16
        chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hello"}],
                                                         "max_tokens": 4})
        assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"]
