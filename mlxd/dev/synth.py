"""Synthetic checkpoints: random, seeded Qwen3 models that mlx-lm loads through the same code as a real one.

(``tiny-llama`` is a llama model with llama's vocabulary layout instead; synth_llama holds what differs.)

Tests, benchmarks and ``make run`` use them, so nothing is ever downloaded. The weights are shaped so that greedy
decoding never produces an added token and rarely meets a near-tie:

* Residual channel 0 is a constant: every embedding row holds the same positive value there and no layer writes
  to it (the output projections' row 0 is zero), so after the final RMSNorm channel 0 is always positive.
* The output rows of added tokens (and of ids beyond the tokenizer's) read only channel 0, with a large negative
  weight, so their logits sit hundreds below every text token's whatever the context.
* Text tokens' output rows ignore channel 0 and spread logits widely (``_LOGIT_STD``). A model whose choice
  depends on context must meet close races now and then; over a thousand greedy steps the closest one seen is
  still wider than float32 rounding, so greedy runs agree across batch sizes. bfloat16 logits tie outright,
  which is one reason CPU tests use float32.
* Deeper presets write less per layer, so the current token keeps its say and greedy text does not collapse
  onto one repeated token.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

from mlxd.dev import synth_llama, synth_tokenizer, synth_vlm

if TYPE_CHECKING:
    import mlx.core as mx
    import mlx.nn as nn

Dtype = Literal["float32", "bfloat16"]


@dataclass(frozen=True)
class Preset:
    """The shape of a synthetic checkpoint (Qwen3 config.json names)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int  # rows of the embedding and output layers
    tokenizer_vocab_size: int  # tokens the trained tokenizer has; ids beyond it are never produced
    max_position_embeddings: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6


PRESETS: dict[str, Preset] = {
    # A few hundred thousand parameters: loads in milliseconds and decodes fast on one CPU core.
    "tiny": Preset(64, 2, 4, 2, 16, 192, 2048, 2048, 8192),
    # tiny with a head size of 32: the smallest shape a q8_0 / q4_0 KV cache (blocks of 32) takes.
    "tiny-hd32": Preset(64, 2, 2, 1, 32, 192, 2048, 2048, 8192),
    # About 50M parameters.
    "small": Preset(512, 12, 8, 4, 64, 1792, 8192, 8192, 32768),
    # Qwen3-0.6B's shapes, its 151936-row vocabulary included; the tokenizer itself has 8192 tokens.
    "qwen3-0.6b": Preset(1024, 28, 16, 8, 128, 3072, 151936, 8192, 40960),
    # A llama model with a 512-piece SentencePiece-style vocabulary (BOS <s> = 1), as llama.cpp's server tests
    # expect of their stories260K presets; made by synth_llama.
    "tiny-llama": Preset(64, 2, 4, 2, 16, 192, 512, 512, 2048, rope_theta=10_000.0, rms_norm_eps=1e-5),
}
LLAMA_PRESETS = ("tiny-llama",)

# Sampling defaults written to generation_config.json (Qwen3's recommended thinking-mode values).
GENERATION_DEFAULTS = {"temperature": 0.6, "top_k": 20, "top_p": 0.95}

_CONSTANT_FRACTION = 0.5  # channel 0's share of an embedding row's squared norm
_LOGIT_STD = 8.0  # spread of text-token logits for a unit-RMS final hidden state
_SUPPRESS = 100.0  # how far below zero, in units of _LOGIT_STD, an added token's logit sits
_RESIDUAL_SCALE = 0.5  # a two-layer model's per-layer output size relative to the embedding's


def _normal(key: mx.array, shape: tuple[int, ...], std: float) -> mx.array:
    import mlx.core as mx

    return mx.random.normal(shape, key=key) * std


def make_weights(preset: Preset, seed: int) -> dict[str, mx.array]:
    """Random float32 weights under mlx-lm's Qwen3 parameter names, seeded by ``seed``."""
    import mlx.core as mx

    p = preset
    d, v = p.hidden_size, p.vocab_size
    names = _weight_shapes(p)
    keys = mx.random.split(mx.random.key(seed), len(names))
    weights: dict[str, mx.array] = {}
    for key, (name, shape) in zip(keys, names.items()):
        if name.endswith("norm.weight"):
            weights[name] = mx.ones(shape)
        elif name == "model.embed_tokens.weight":
            rows = _normal(key, shape, 1.0)
            constant = (_CONSTANT_FRACTION / (1 - _CONSTANT_FRACTION) * (d - 1)) ** 0.5
            weights[name] = mx.concatenate([mx.full((v, 1), constant), rows[:, 1:]], axis=1)
        elif name == "lm_head.weight":
            weights[name] = _output_layer(key, p)
        else:
            fan_in = shape[1]
            std = fan_in**-0.5
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                # Zero row 0: no layer writes channel 0. The depth factor keeps the sum of all layers' writes
                # about the same size in every preset.
                scale = _RESIDUAL_SCALE * (2 / p.num_hidden_layers) ** 0.5
                w = _normal(key, shape, std * scale)
                w = mx.concatenate([mx.zeros((1, fan_in)), w[1:]], axis=0)
            else:
                w = _normal(key, shape, std)
            weights[name] = w
    mx.eval(weights)
    return weights


def _output_layer(key: mx.array, p: Preset) -> mx.array:
    import mlx.core as mx

    d, v = p.hidden_size, p.vocab_size
    n_text = p.tokenizer_vocab_size - len(synth_tokenizer.ADDED_TOKENS)
    text_rows = _normal(key, (n_text, d - 1), _LOGIT_STD / (d - 1) ** 0.5)
    text_rows = mx.concatenate([mx.zeros((n_text, 1)), text_rows], axis=1)
    # Channel 0 after the final norm is about sqrt(d / 3) (the layers add about as much as an embedding row
    # holds); this weight puts an added id's logit near -_SUPPRESS spreads, and well below zero even if channel 0
    # were ten times smaller.
    suppressed = mx.zeros((v - n_text, d))
    suppressed[:, 0] = -_SUPPRESS * _LOGIT_STD / (d / 3) ** 0.5
    return mx.concatenate([text_rows, suppressed], axis=0)


def _weight_shapes(p: Preset) -> dict[str, tuple[int, ...]]:
    d, hd = p.hidden_size, p.head_dim
    q, kv = p.num_attention_heads * hd, p.num_key_value_heads * hd
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (p.vocab_size, d)}
    for i in range(p.num_hidden_layers):
        pre = f"model.layers.{i}."
        shapes |= {
            pre + "input_layernorm.weight": (d,),
            pre + "self_attn.q_proj.weight": (q, d),
            pre + "self_attn.k_proj.weight": (kv, d),
            pre + "self_attn.v_proj.weight": (kv, d),
            pre + "self_attn.o_proj.weight": (d, q),
            pre + "self_attn.q_norm.weight": (hd,),
            pre + "self_attn.k_norm.weight": (hd,),
            pre + "post_attention_layernorm.weight": (d,),
            pre + "mlp.gate_proj.weight": (p.intermediate_size, d),
            pre + "mlp.up_proj.weight": (p.intermediate_size, d),
            pre + "mlp.down_proj.weight": (d, p.intermediate_size),
        }
    shapes |= {"model.norm.weight": (d,), "lm_head.weight": (p.vocab_size, d)}
    return shapes


def _parameters(p: Preset) -> int:
    return sum(math.prod(shape) for shape in _weight_shapes(p).values())


def model_config(preset: Preset, ids: dict[str, int], dtype: Dtype) -> dict[str, object]:
    """config.json for Qwen3ForCausalLM with the given shape."""
    p = preset
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ids[synth_tokenizer.BOS_TOKEN],
        "eos_token_id": ids[synth_tokenizer.EOS_TOKEN],
        "head_dim": p.head_dim,
        "hidden_act": "silu",
        "hidden_size": p.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": p.intermediate_size,
        "max_position_embeddings": p.max_position_embeddings,
        "max_window_layers": p.num_hidden_layers,
        "model_type": "qwen3",
        "num_attention_heads": p.num_attention_heads,
        "num_hidden_layers": p.num_hidden_layers,
        "num_key_value_heads": p.num_key_value_heads,
        "rms_norm_eps": p.rms_norm_eps,
        "rope_scaling": None,
        "rope_theta": p.rope_theta,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": p.vocab_size,
    }


def make_checkpoint(
    out_dir: str | Path,
    preset: str = "tiny",
    dtype: Dtype = "float32",
    quantize: int | None = None,
    seed: int = 0,
    passthrough: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write a synthetic checkpoint to ``out_dir`` (created; must not hold anything yet) and return its path.

    The same arguments in the same environment (Python's standard library, mlx, tokenizers) give the same bytes.
    ``passthrough`` appends that many layers that add nothing to the residual stream (zero output projections):
    the preset's own checkpoint, same seed, is then a draft whose every proposal the target accepts.
    The files are written next to ``out_dir`` first and moved into place whole, so a reader never sees half.
    ``progress`` is told each step as it starts (``mlxd dev synth-model`` prints them: a large preset takes a minute).
    """
    if synth_vlm.is_preset(preset):  # the multimodal presets (float32, mlx-vlm's model classes)
        return synth_vlm.make_checkpoint(out_dir, preset, seed)
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"unknown dtype {dtype!r}; choose float32 or bfloat16")
    if quantize not in (None, 4, 8):
        raise ValueError(f"cannot quantize to {quantize} bits; choose 4 or 8")
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} already exists and is not an empty directory")
    shape = PRESETS[preset]
    staging = out.with_name(f".{out.name}.partial-{os.getpid()}")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        _write(staging, shape, preset, dtype, quantize, seed, passthrough, progress or (lambda _: None))
        if out.exists():
            out.rmdir()
        staging.rename(out)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError) and out.is_dir() and (out / "config.json").exists():
            # Another process made the same checkpoint first.
            raise FileExistsError(f"{out} was written by another process meanwhile") from exc
        raise
    return out


def _write(staging: Path, shape: Preset, preset: str, dtype: Dtype, quantize: int | None, seed: int,
           passthrough: int, progress: Callable[[str], None]) -> None:
    """Every file of the checkpoint, into ``staging``."""
    import mlx.core as mx
    from mlx_lm.models import qwen3

    if preset in LLAMA_PRESETS:
        _write_llama(staging, shape, preset, dtype, quantize, seed, progress)
        return
    progress(f"training a {shape.tokenizer_vocab_size:,}-token BPE tokenizer on the Python standard library")
    tokenizer, corpus = synth_tokenizer.train_tokenizer(shape.tokenizer_vocab_size)
    synth_tokenizer.write_tokenizer_files(tokenizer, staging, max_length=shape.max_position_embeddings)
    ids = synth_tokenizer.added_token_ids(tokenizer)

    progress(f"drawing random weights for {shape.num_hidden_layers} layers ({_parameters(shape):,} parameters)")
    weights = make_weights(shape, seed)
    if passthrough:  # layers L.. whose attention and MLP write zeros: the residual passes through unchanged
        extra = replace(shape, num_hidden_layers=shape.num_hidden_layers + passthrough)
        for name, size in _weight_shapes(extra).items():
            if name not in weights:
                weights[name] = mx.ones(size) if name.endswith("norm.weight") else mx.zeros(size)
        shape = extra
    synthetic = {"preset": preset, "seed": seed, "dtype": dtype, "quantize": quantize,
                 "passthrough_layers": passthrough, "shape": asdict(shape),
                 "tokenizer_corpus": {"files": corpus.files, "chars": corpus.chars}}
    _save(staging, qwen3, weights, model_config(shape, ids, dtype), dtype, quantize, synthetic, progress)
    generation = {
        "bos_token_id": ids[synth_tokenizer.BOS_TOKEN],
        "do_sample": True,
        "eos_token_id": [ids[synth_tokenizer.EOS_TOKEN], ids["<|endoftext|>"]],
        "pad_token_id": ids[synth_tokenizer.PAD_TOKEN],
        **GENERATION_DEFAULTS,
    }
    (staging / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")


def _save(staging: Path, family: Any, weights: dict[str, Any], config: dict[str, Any], dtype: Dtype,
          quantize: int | None, synthetic: dict[str, Any], progress: Callable[[str], None]) -> None:
    """The weights and config.json, through mlx-lm's model class of ``family`` (its module) and its savers."""
    import mlx.core as mx
    from mlx.utils import tree_unflatten
    from mlx_lm.utils import quantize_model, save_config, save_model

    model: nn.Module = family.Model(family.ModelArgs.from_dict(config))
    if dtype == "bfloat16":
        weights = {name: w.astype(mx.bfloat16) for name, w in weights.items()}
    model.update(tree_unflatten(list(weights.items())))
    del weights
    if quantize is not None:
        progress(f"quantizing to {quantize} bits")
        model, config = quantize_model(model, config, group_size=64, bits=quantize)
    config["mlxd_synthetic"] = synthetic
    progress(f"saving the weights ({dtype})")
    save_model(staging, model, donate_model=True)
    save_config(config, staging / "config.json")


def _write_llama(staging: Path, shape: Preset, preset: str, dtype: Dtype, quantize: int | None, seed: int,
                 progress: Callable[[str], None]) -> None:
    """Every file of a llama-vocabulary checkpoint (synth_llama), into ``staging``."""
    from mlx_lm.models import llama

    progress(f"training a {shape.tokenizer_vocab_size:,}-token tokenizer")
    tokenizer = synth_llama.train_tokenizer(shape.tokenizer_vocab_size)
    synth_llama.write_tokenizer_files(tokenizer, staging, max_length=shape.max_position_embeddings)
    synthetic = {"preset": preset, "seed": seed, "dtype": dtype, "quantize": quantize, "shape": asdict(shape),
                 "tokenizer_corpus": synth_llama.CORPUS.name}
    progress(f"drawing random weights for {shape.num_hidden_layers} layers")
    _save(staging, llama, synth_llama.make_weights(shape, seed), synth_llama.model_config(shape, dtype), dtype,
          quantize, synthetic, progress)
    generation = synth_llama.generation_config()
    (staging / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")
