"""The synthetic image-and-audio checkpoint (``gemma4-tiny``): a random Gemma 4 with a vision tower and an audio
tower, a few hundred thousand parameters, written as mlx-vlm's loader reads it (see ``synth_vlm``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlxd.dev import synth_tokenizer
from mlxd.dev.synth_vlm import build_model, save_weights, tokenizer_with

# Gemma 4's media tokens: begin/end of an image or clip and the soft token the processor repeats.
TOKENS = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>",
          "boa_token": "<start_of_audio>", "eoa_token": "<end_of_audio>", "audio_token": "<audio_soft_token>",
          "video_token": "<|video|>"}
IMAGE_TOKENS = 16  # soft tokens per image (the processor's max_soft_tokens)
AUDIO_MS_PER_TOKEN = 40
AUDIO_TOKENS = 750  # at most per clip: 30 s
BLOCK_GAIN = 3.0

CHAT_TEMPLATE = """\
{%- for message in messages -%}
  {{- '<|im_start|>' + message.role + '\\n' -}}
  {%- if message.content is string -%}{{- message.content -}}
  {%- else -%}{%- for part in message.content -%}{%- if 'text' in part -%}{{- part.text -}}{%- endif -%}{%- endfor -%}
  {%- endif -%}
  {{- '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
"""


def write(out: Path, seed: int) -> None:
    """Every file of the checkpoint, into ``out``."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.models import gemma4

    ids = tokenizer_with(out, tuple(TOKENS.values()), CHAT_TEMPLATE, 8192)
    _name_media_tokens(out)
    n_text = min(ids.values())
    vocab = max(ids.values()) + 1
    hidden = 64
    text = {"model_type": "gemma4_text", "hidden_size": hidden, "num_hidden_layers": 2, "intermediate_size": 128,
            "num_attention_heads": 4, "head_dim": 16, "global_head_dim": 16, "num_key_value_heads": 1,
            "num_kv_shared_layers": 0, "hidden_size_per_layer_input": 0, "vocab_size": vocab,
            "vocab_size_per_layer_input": vocab, "sliding_window": 512, "sliding_window_pattern": 2,
            "layer_types": ["sliding_attention", "full_attention"], "final_logit_softcapping": None,
            "use_double_wide_mlp": False, "max_position_embeddings": 8192, "tie_word_embeddings": True}
    config: dict[str, Any] = {
        "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": text,
        "vision_config": {"model_type": "gemma4_vision", "hidden_size": 32, "intermediate_size": 64,
                          "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
                          "head_dim": 16, "global_head_dim": 16, "patch_size": 16, "position_embedding_size": 1024,
                          "pooling_kernel_size": 3, "default_output_length": IMAGE_TOKENS},
        "audio_config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                         "subsampling_conv_channels": [8, 4], "conv_kernel_size": 5, "attention_chunk_size": 12,
                         "attention_context_left": 13, "attention_context_right": 0, "output_proj_dims": 32},
        "vocab_size": vocab, "hidden_size": hidden, "tie_word_embeddings": True,
        "image_token_id": ids[TOKENS["image_token"]], "audio_token_id": ids[TOKENS["audio_token"]],
        "boi_token_id": ids[TOKENS["boi_token"]], "eoi_token_id": ids[TOKENS["eoi_token"]],
        "boa_token_id": ids[TOKENS["boa_token"]], "eoa_token_id": ids[TOKENS["eoa_token"]],
        "vision_soft_tokens_per_image": IMAGE_TOKENS, "audio_ms_per_token": AUDIO_MS_PER_TOKEN,
        "audio_soft_tokens_per_image": AUDIO_TOKENS,
        "bos_token_id": ids[synth_tokenizer.BOS_TOKEN], "eos_token_id": ids[synth_tokenizer.EOS_TOKEN],
        "pad_token_id": ids[synth_tokenizer.PAD_TOKEN], "torch_dtype": "float32",
    }
    mx.random.seed(seed)
    model = build_model(gemma4, config, ["text", "vision", "audio"])
    weights = dict(tree_flatten(model.parameters()))
    keys = iter(mx.random.split(mx.random.key(seed), len(weights) + 1))
    for name, w in list(weights.items()):
        if w.ndim >= 2 and not name.endswith("embed_tokens.weight"):
            fan_in = 1
            for d in w.shape[1:]:
                fan_in *= d
            w = mx.random.normal(w.shape, key=next(keys)) * fan_in ** -0.5
            if name.startswith("language_model.") and name.endswith(("o_proj.weight", "down_proj.weight")):
                w[0] = 0.0  # no block writes channel 0
            weights[name] = w
    # The blocks' outputs well above the token's own embedding: with tied embeddings a model dominated by its
    # residual stream would only repeat its last token.
    for name in list(weights):
        if name.startswith("language_model.") and name.endswith(("post_attention_layernorm.weight",
                                                                  "post_feedforward_layernorm.weight")):
            weights[name] = mx.full(weights[name].shape, BLOCK_GAIN)
    # Tied embeddings: channel 0 is a constant in text rows and a large negative value in added tokens' rows,
    # whose other channels are zero, so an added token's logit sits far below every text token's.
    embed = mx.random.normal((vocab, hidden), key=next(keys)) * hidden ** -0.5
    embed[:, 0] = 0.5
    embed[n_text:] = 0.0
    embed[n_text:, 0] = -30.0
    weights["language_model.model.embed_tokens.weight"] = embed
    save_weights(out, weights)
    config["mlxd_synthetic"] = {"preset": "gemma4-tiny", "seed": seed, "dtype": "float32"}
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    processor = {"processor_class": "Gemma4Processor", "audio_seq_length": AUDIO_TOKENS,
                 "audio_ms_per_token": AUDIO_MS_PER_TOKEN,
                 "image_processor": {"image_processor_type": "Gemma4ImageProcessor", "patch_size": 16,
                                     "max_soft_tokens": IMAGE_TOKENS, "pooling_kernel_size": 3},
                 "feature_extractor": {"feature_extractor_type": "Gemma4AudioFeatureExtractor",
                                       "sampling_rate": 16000}}
    (out / "processor_config.json").write_text(json.dumps(processor, indent=2, sort_keys=True) + "\n")
    generation = {"bos_token_id": config["bos_token_id"], "eos_token_id": [config["eos_token_id"]],
                  "do_sample": True, "temperature": 1.0, "top_k": 64, "top_p": 0.95}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")


def _name_media_tokens(out: Path) -> None:
    """Name the media tokens in tokenizer_config.json, where Gemma 4's processor reads them from the tokenizer."""
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["extra_special_tokens"] = dict(TOKENS)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
