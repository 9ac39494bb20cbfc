"""Synthetic checkpoints: loadable by mlx-lm as a real Qwen3 checkpoint, reproducible, and decisive under greedy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxd.dev import cli, synth, synth_tokenizer
from mlxd.engine.loading.loader import LoadedModel

PROMPTS = [
    "def fibonacci(n):\n",
    "The quick brown fox",
    "import os\nimport sys\n\n",
    "Hello, how are you today?",
    "<|im_start|>user\nWrite a haiku.<|im_end|>\n<|im_start|>assistant\n",
]
STEPS = 200


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def test_checkpoint_is_a_qwen3_checkpoint(tiny_checkpoint: Path) -> None:
    from mlx_lm import load

    model, tokenizer = load(str(tiny_checkpoint))
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    generation = json.loads((tiny_checkpoint / "generation_config.json").read_text())
    vocab = tokenizer.get_vocab()

    assert config["model_type"] == "qwen3" and config["tie_word_embeddings"] is False
    assert type(model).__module__ == "mlx_lm.models.qwen3"
    assert {"temperature", "top_k", "top_p"} <= generation.keys()
    for text, _ in synth_tokenizer.ADDED_TOKENS:
        assert tokenizer.encode(text, add_special_tokens=False) == [vocab[text]]
    assert tokenizer.eos_token == "<|im_end|>"
    assert set(tokenizer.eos_token_ids) == {vocab["<|im_end|>"], vocab["<|endoftext|>"]}
    assert tokenizer.has_thinking and tokenizer.has_tool_calling
    assert tokenizer.decode(tokenizer.encode("for i in range(10):\n    pass")) == "for i in range(10):\n    pass"


def test_chat_template_renders_qwen3_format(tiny_model: LoadedModel) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Call the tool.",
            "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "sunny"},
    ]
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    text = tiny_model.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)

    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert '\n<tools>\n{"type": "function", "function": {"name": "weather"' in text
    assert text.endswith(
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nCall the tool.\n</think>\n\n"
        '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    no_think = tiny_model.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert no_think == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_same_seed_same_bytes(tmp_path: Path, tiny_checkpoint: Path) -> None:
    again = synth.make_checkpoint(tmp_path / "again", preset="tiny", seed=0)
    other = synth.make_checkpoint(tmp_path / "other", preset="tiny", seed=1)

    assert _files(again) == _files(tiny_checkpoint)
    assert _files(other)["tokenizer.json"] == _files(again)["tokenizer.json"]
    assert _files(other)["model.safetensors"] != _files(again)["model.safetensors"]


def test_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    with pytest.raises(FileExistsError):
        synth.make_checkpoint(tmp_path / "taken")


def test_greedy_is_decisive_and_never_special(tiny_model: LoadedModel) -> None:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    first_added = tiny_model.tokenizer.convert_tokens_to_ids(synth_tokenizer.ADDED_TOKENS[0][0])
    gaps, margins, produced = [], [], []
    for prompt in PROMPTS:
        cache = make_prompt_cache(tiny_model.model)
        tokens = mx.array([tiny_model.tokenizer.encode(prompt)])
        for _ in range(STEPS):
            logits = tiny_model.model(tokens, cache=cache)[0, -1]
            top2 = mx.topk(logits, 2)
            best = int(mx.argmax(logits).item())
            gaps.append((mx.max(top2) - mx.min(top2)).item() / mx.std(logits[:first_added]).item())
            margins.append((logits[best] - mx.max(logits[first_added:])).item())
            produced.append(best)
            tokens = mx.array([[best]])

    assert max(produced) < first_added, "greedy produced an added token"
    assert min(margins) > 100.0, "an added token's logit came near the winner's"
    # float32 rounding moves a logit by ~1e-6 of the spread; the closest race seen is far wider.
    assert min(gaps) > 1e-5
    assert len(set(produced)) > 50, "greedy output should not collapse to a few tokens"


def test_greedy_matches_across_batch_sizes(tiny_model: LoadedModel) -> None:
    from mlx_lm import batch_generate, stream_generate
    from mlx_lm.sample_utils import make_sampler

    greedy = make_sampler(temp=0.0)
    prompts = [tiny_model.tokenizer.encode(p) for p in PROMPTS]
    solo = [
        [r.token for r in stream_generate(tiny_model.model, tiny_model.tokenizer, p, max_tokens=64, sampler=greedy)]
        for p in prompts
    ]
    batched = batch_generate(
        tiny_model.model, tiny_model.tokenizer, prompts, max_tokens=64, sampler=greedy, return_token_ids=True
    )

    assert [list(ids) for ids in batched.token_ids] == solo
    assert all(len(ids) == 64 for ids in solo)


def test_cli_writes_a_quantized_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import mlx.nn as nn
    from mlx_lm import stream_generate
    from mlx_lm.sample_utils import make_sampler

    from mlxd.engine.loading.loader import load_model

    assert cli.main(["synth-model", str(tmp_path / "q4"), "--quantize", "4", "--seed", "3"]) == 0
    printed = capsys.readouterr()
    assert "preset tiny, 360,832 parameters" in printed.out
    # Each step a person waits for is named on stderr as it starts, with the time so far.
    steps = [line.split("] ", 1)[1] for line in printed.err.splitlines()]
    assert [s.split(" ")[0] for s in steps] == ["making", "training", "drawing", "quantizing", "saving"], printed.err
    assert "360,832 parameters" in steps[2]
    loaded = load_model(tmp_path / "q4")
    tokens = [
        r.token
        for r in stream_generate(
            loaded.model, loaded.tokenizer, "def main():", max_tokens=32, sampler=make_sampler(temp=0.0)
        )
    ]

    assert loaded.config["quantization"]["bits"] == 4
    assert isinstance(loaded.model.lm_head, nn.QuantizedLinear)
    assert len(tokens) == 32 and max(tokens) < len(loaded.tokenizer) - len(synth_tokenizer.ADDED_TOKENS)


def test_cli_refuses_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["synth-model", str(tmp_path / "x"), "--preset", "huge"]) == 2
    assert "invalid choice: 'huge'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_cli_writes_a_lora_adapter_the_loader_accepts(tiny_checkpoint: Path, tiny_model: LoadedModel,
                                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import mlx.core as mx

    from mlxd.engine.loading.lora import adapter_specs, attach_adapters, check_adapters

    out = tmp_path / "style"
    assert cli.main(["synth-lora", str(tiny_checkpoint), str(out), "--seed", "5", "--rank", "2"]) == 0
    assert f"wrote {out}: rank 2, scale 2.0, keys self_attn.q_proj,self_attn.v_proj" in capsys.readouterr().out
    specs = check_adapters(adapter_specs([str(out)], []))
    model = synth_loaded(tiny_checkpoint).model
    base = tiny_model.model(mx.array([[1, 2, 3, 4]]))
    attach_adapters(model, specs)
    adapted = model(mx.array([[1, 2, 3, 4]]))
    # The adapter's B is drawn non-zero, so it moves the logits by far more than float32 rounding.
    assert float(mx.abs(adapted - base).max()) > 1e-2


def test_cli_refuses_a_lora_for_something_that_is_no_checkpoint(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["synth-lora", str(tmp_path), str(tmp_path / "out")]) == 1
    assert "is not an MLX checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def synth_loaded(path: Path) -> LoadedModel:
    from mlxd.engine.loading.loader import load_model

    return load_model(path)
