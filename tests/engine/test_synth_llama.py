"""The llama-vocabulary synthetic checkpoint (``tiny-llama``): llama's layout, reproducible, never special."""

from __future__ import annotations

import json
from pathlib import Path

from mlxd.dev import synth

from mlxd.dev import synth_llama
from mlxd.engine.loading.loader import load_model


def test_layout_is_llamas(tiny_llama_checkpoint: Path) -> None:
    config = json.loads((tiny_llama_checkpoint / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert config["bos_token_id"] == 1 and config["vocab_size"] == 512
    tok_config = json.loads((tiny_llama_checkpoint / "tokenizer_config.json").read_text())
    assert tok_config["add_bos_token"] is True and tok_config["bos_token"] == "<s>"
    loaded = load_model(tiny_llama_checkpoint)
    tok = loaded.tokenizer
    assert tok.convert_ids_to_tokens([0, 1, 2]) == ["<unk>", "<s>", "</s>"]
    assert tok.convert_ids_to_tokens([5, 260]) == ["<0x00>", "<0xFF>"]
    ids = tok.encode("The meaning of life")
    assert ids[0] == 1 and tok.convert_ids_to_tokens(ids[1:2])[0].startswith("\u2581")
    assert tok.decode(tok.encode("emoji 🤗"), skip_special_tokens=True) == "emoji 🤗"  # through the byte pieces
    rendered = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_same_seed_same_bytes(tmp_path: Path, tiny_llama_checkpoint: Path) -> None:
    again = synth.make_checkpoint(tmp_path / "again", preset="tiny-llama")
    files = {p.name: p.read_bytes() for p in sorted(again.iterdir())}
    assert files == {p.name: p.read_bytes() for p in sorted(tiny_llama_checkpoint.iterdir())}


def test_greedy_writes_trained_pieces_only(tiny_llama_checkpoint: Path) -> None:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    loaded = load_model(tiny_llama_checkpoint)
    held = len(synth_llama.SPECIAL) + synth_llama.N_BYTES  # specials and byte pieces come first
    produced = []
    for prompt in ("Once upon a time", "The daemon reloads its configuration", "Hi"):
        cache = make_prompt_cache(loaded.model)
        tokens = mx.array([loaded.tokenizer.encode(prompt)])
        for _ in range(64):
            logits = loaded.model(tokens, cache=cache)[0, -1]
            best = int(mx.argmax(logits).item())
            assert (logits[best] - mx.max(logits[:held])).item() > 100.0
            produced.append(best)
            tokens = mx.array([[best]])
    assert min(produced) >= held
    assert len(set(produced)) > 10
