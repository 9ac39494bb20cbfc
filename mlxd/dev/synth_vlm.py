"""Synthetic multimodal checkpoints: tiny random Qwen2-VL (image) and Gemma 4 (image and audio) models.

mlx-vlm loads them through the same code as a real checkpoint (its model classes, its processors), so serving
images and audio can be tested and measured with nothing downloaded. The tokenizer is the project's own
(``synth_tokenizer``, trained on the standard library) with the model family's media tokens added, and the
processor configs are written by hand with small pixel bounds, so an image costs a few dozen tokens.

As in ``synth``, channel 0 of the residual stream is a constant that no layer writes, and the output rows of
added tokens read only that channel with a large negative weight: greedy decoding never produces a media or
control token, and batched runs agree with solo runs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from mlxd.dev import synth_tokenizer

# The Qwen2-VL family's media tokens, added after the synthetic tokenizer's own.
QWEN_VL_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
PATCH, MERGE = 14, 2
# Pixel bounds of the image processor: at most 16 merged patches (a 112 x 112 image) per image.
MIN_PIXELS, MAX_PIXELS = (PATCH * MERGE) ** 2, (PATCH * MERGE) ** 2 * 16

# Qwen2-VL's chat format: the synthetic Qwen3 template's turns, with typed content parts rendered as Qwen2-VL
# renders them (an image part becomes the vision block the processor expands).
QWEN_VL_CHAT_TEMPLATE = """\
{%- for message in messages -%}
  {%- if loop.first and message.role != 'system' -%}
    {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' -}}
  {%- endif -%}
  {{- '<|im_start|>' + message.role + '\\n' -}}
  {%- if message.content is string -%}
    {{- message.content -}}
  {%- else -%}
    {%- for part in message.content -%}
      {%- if part.type == 'image' or 'image' in part or 'image_url' in part -%}
        {{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
      {%- elif 'text' in part -%}
        {{- part.text -}}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {{- '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
"""

PRESETS = ("qwen2-vl-tiny", "gemma4-tiny")

_LOGIT_STD = 8.0
ATTENTION_GAIN = 2.0
RESIDUAL_SCALE = 0.7
_SUPPRESS = 100.0


def is_preset(name: str) -> bool:
    return name in PRESETS


def make_checkpoint(out_dir: str | Path, preset: str, seed: int = 0) -> Path:
    """Write the multimodal synthetic checkpoint ``preset`` to ``out_dir`` (new or empty) and return its path.

    Written next to ``out_dir`` and moved into place whole, as ``synth.make_checkpoint`` does.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown multimodal preset {preset!r}; choose one of {', '.join(PRESETS)}")
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} already exists and is not an empty directory")
    staging = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        if preset == "gemma4-tiny":
            from mlxd.dev import synth_gemma4

            synth_gemma4.write(staging, seed)
        else:
            _write_qwen2_vl(staging, seed)
        if out.exists():
            out.rmdir()
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def tokenizer_with(out: Path, extra: tuple[str, ...], template: str, max_length: int) -> dict[str, int]:
    """The synthetic tokenizer with ``extra`` special tokens appended, written to ``out``; every added id."""
    from tokenizers import AddedToken

    tokenizer, _ = synth_tokenizer.train_tokenizer(2048)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in extra])
    synth_tokenizer.write_tokenizer_files(tokenizer, out, max_length=max_length)
    ids = synth_tokenizer.added_token_ids(tokenizer)
    for t in extra:
        token_id = tokenizer.token_to_id(t)
        assert token_id is not None  # added just above
        ids[t] = token_id
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    for t in extra:
        config["added_tokens_decoder"][str(ids[t])] = {"content": t, "lstrip": False, "normalized": False,
                                                       "rstrip": False, "single_word": False, "special": True}
    config["additional_special_tokens"] = list(config["additional_special_tokens"]) + list(extra)
    config["chat_template"] = template
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return ids


def _write_qwen2_vl(out: Path, seed: int) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.models import qwen2_vl

    ids = tokenizer_with(out, QWEN_VL_TOKENS, QWEN_VL_CHAT_TEMPLATE, 8192)
    n_text = min(ids.values())  # every added id comes after the trained vocabulary
    vocab = max(ids.values()) + 1
    hidden, heads = 64, 4
    config: dict[str, Any] = {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "model_type": "qwen2_vl",
        "hidden_size": hidden, "num_hidden_layers": 2, "intermediate_size": 192, "num_attention_heads": heads,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "vocab_size": vocab, "max_position_embeddings": 8192,
        "rope_theta": 1_000_000.0, "tie_word_embeddings": False,
        # head_dim 16: rotary halves of 8 split over time, height and width
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        "bos_token_id": ids[synth_tokenizer.BOS_TOKEN], "eos_token_id": ids[synth_tokenizer.EOS_TOKEN],
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
        "vision_config": {"model_type": "qwen2_vl", "depth": 1, "embed_dim": 32, "hidden_size": hidden,
                          "num_heads": 2, "mlp_ratio": 2, "patch_size": PATCH, "spatial_patch_size": PATCH,
                          "spatial_merge_size": MERGE, "temporal_patch_size": 2, "in_channels": 3},
        "torch_dtype": "float32",
    }
    mx.random.seed(seed)
    model = build_model(qwen2_vl, config, ["text", "vision"])
    weights = dict(tree_flatten(model.parameters()))
    key = mx.random.key(seed)
    k_embed, k_head = mx.random.split(key)
    # Channel 0 constant in every embedding row, never written by a layer; added tokens' logits far below.
    embed = mx.random.normal((vocab, hidden), key=k_embed)
    embed[:, 0] = (hidden - 1) ** 0.5
    weights["language_model.model.embed_tokens.weight"] = embed
    head = mx.random.normal((vocab, hidden), key=k_head) * (_LOGIT_STD / (hidden - 1) ** 0.5)
    head[:, 0] = 0.0
    head[n_text:] = 0.0
    head[n_text:, 0] = -_SUPPRESS * _LOGIT_STD / (hidden / 3) ** 0.5
    weights["language_model.lm_head.weight"] = head
    # The vision tower at unit scale (mlx's default init leaves its output far smaller than a token embedding),
    # so that the image changes what the model says.
    vision = [n for n, w in weights.items() if n.startswith("vision_tower.") and w.ndim >= 2]
    for name, k in zip(vision, mx.random.split(mx.random.key(seed + 1), len(vision))):
        shape = weights[name].shape
        fan_in = 1
        for d in shape[1:]:
            fan_in *= d
        weights[name] = mx.random.normal(shape, key=k) * (2.0 / fan_in) ** 0.5
    # The language model's layers as synth draws them (normal, 1/sqrt(fan_in)), with sharper attention
    # (ATTENTION_GAIN on queries and keys) so that what the model says depends on more than its last tokens.
    layers = [n for n, w in weights.items() if n.startswith("language_model.model.layers.") and w.ndim == 2]
    for name, k in zip(layers, mx.random.split(mx.random.key(seed + 2), len(layers))):
        shape = weights[name].shape
        w = mx.random.normal(shape, key=k) * shape[1] ** -0.5
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            w = w * ATTENTION_GAIN
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            w = w * RESIDUAL_SCALE
            w[0] = 0.0  # nothing writes channel 0
        weights[name] = w
    save_weights(out, weights)
    config["mlxd_synthetic"] = {"preset": "qwen2-vl-tiny", "seed": seed, "dtype": "float32"}
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    image = {"image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor",
             "patch_size": PATCH, "merge_size": MERGE, "temporal_patch_size": 2,
             "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS, "do_convert_rgb": True, "do_normalize": True,
             "do_rescale": True, "rescale_factor": 1 / 255,
             "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}
    (out / "preprocessor_config.json").write_text(json.dumps(image, indent=2, sort_keys=True) + "\n")
    generation = {"bos_token_id": config["bos_token_id"], "eos_token_id": [config["eos_token_id"],
                  ids["<|endoftext|>"]], "do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")


def save_weights(out: Path, weights: dict[str, Any]) -> None:
    """model.safetensors and its index, as mlx-vlm's loader reads them."""
    import mlx.core as mx

    mx.eval(weights)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    index = {"metadata": {"total_size": sum(int(w.nbytes) for w in weights.values()),
                          "total_parameters": sum(int(w.size) for w in weights.values())},
             "weight_map": {name: "model.safetensors" for name in sorted(weights)}}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def build_model(module: Any, config: dict[str, Any], parts: list[str]) -> Any:
    """An mlx-vlm model of ``module`` from ``config`` as its loader builds it (the text config from the root)."""
    from mlx_vlm.utils import update_module_configs

    full = json.loads(json.dumps(config))
    full.setdefault("text_config", {k: v for k, v in full.items() if k not in ("vision_config", "audio_config")})
    model_config = update_module_configs(module.ModelConfig.from_dict(dict(full)), module, full, parts)
    return module.Model(model_config)
