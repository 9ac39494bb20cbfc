"""The llama-vocabulary synthetic checkpoint (``--preset tiny-llama``): random llama weights, a SentencePiece-style BPE.

llama.cpp's own server tests are written against a llama model (stories260K): the BOS token ``<s>`` is id 1 and
``add_special`` puts it first, a prompt is echoed as ``<s> ...``, a 512-token vocabulary makes a paragraph of
prose some 300 tokens long. This preset has that shape, made here rather than downloaded:

* the tokenizer is a BPE trained by ``tokenizers`` on ``synth_corpus.txt`` (a frozen copy of this project's own
  README and operations pages, so that editing the docs never changes a checkpoint), laid out as llama's
  SentencePiece conversions are: ``<unk>``, ``<s>``, ``</s>`` at 0, 1, 2, then ChatML's two markers, then the 256
  byte-fallback pieces ``<0x00>``..``<0xFF>``, then the trained pieces; spaces become "▁" with one prepended, and
  a template post-processor adds ``<s>`` (``add_bos_token``);
* the weights are the Qwen3 maker's (synth.make_weights: the constant channel, the wide logit spread) without
  the per-head q/k norms llama lacks, and the output rows of the special and byte pieces read only the constant
  channel, so greedy decoding writes trained pieces only and never ends by itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

if TYPE_CHECKING:
    import mlx.core as mx

    from mlxd.dev.synth import Dtype, Preset

CORPUS = Path(__file__).with_name("synth_corpus.txt")
SPECIAL = ("<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>")
UNK, BOS, EOS, EOT = "<unk>", "<s>", "</s>", "<|im_end|>"
N_BYTES = 256
SPACE = "\u2581"  # SentencePiece's word-boundary mark

# ChatML, written for this preset: a system turn when given, each message's text (a list of parts as its text
# parts), and the assistant's header when a reply is wanted.
CHAT_TEMPLATE = """\
{%- for message in messages -%}
  {%- if message.content is string -%}{%- set text = message.content -%}
  {%- else -%}{%- set text = namespace(s='') -%}
    {%- for part in message.content or [] -%}
      {%- if part.type == 'text' -%}{%- set text.s = text.s + part.text -%}{%- endif -%}
    {%- endfor -%}{%- set text = text.s -%}
  {%- endif -%}
  {{- '<|im_start|>' + message.role + '\\n' + text + '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
"""


def train_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-fallback BPE of ``vocab_size`` pieces in llama's layout (specials, bytes, trained pieces)."""
    text = CORPUS.read_text(encoding="utf-8")
    n_trained = vocab_size - len(SPECIAL) - N_BYTES
    # Trained with a word split, so that no piece spans a word boundary (SentencePiece's pieces start at one).
    trainer_tok = Tokenizer(models.BPE(unk_token=UNK))
    trainer_tok.normalizer = _normalizer()
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=n_trained, show_progress=False, limit_alphabet=n_trained // 2)
    trainer_tok.train_from_iterator(text.split("\n\n"), trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    pieces = sorted(trained["vocab"], key=trained["vocab"].__getitem__)
    if len(pieces) != n_trained:
        raise RuntimeError(f"{CORPUS.name} only supports {len(pieces)} trained pieces, not {n_trained}")
    vocab = {text: i for i, text in enumerate(SPECIAL)}
    vocab |= {f"<0x{b:02X}>": len(SPECIAL) + b for b in range(N_BYTES)}
    vocab |= {piece: len(SPECIAL) + N_BYTES + i for i, piece in enumerate(pieces)}
    # tokenizers writes a merge as a pair (older versions: one "a b" string).
    merges: list[tuple[str, str]] = [
        (str(m[0]), str(m[1])) for m in (x.split(" ", 1) if isinstance(x, str) else x for x in trained["merges"])]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=UNK, fuse_unk=True, byte_fallback=True))
    tokenizer.normalizer = _normalizer()
    tokenizer.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, vocab[BOS])])
    tokenizer.add_special_tokens([AddedToken(text, special=True, normalized=False) for text in SPECIAL])
    return tokenizer


def _normalizer() -> normalizers.Normalizer:
    """llama's: one "▁" before the text, and every space as "▁"."""
    return normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])


def write_tokenizer_files(tokenizer: Tokenizer, out_dir: Path, *, max_length: int) -> None:
    """tokenizer.json, tokenizer_config.json (``add_bos_token``, the chat template) and special_tokens_map.json."""
    tokenizer.save(str(out_dir / "tokenizer.json"), pretty=False)
    added = {
        str(tokenizer.token_to_id(text)): {"content": text, "lstrip": False, "normalized": False, "rstrip": False,
                                           "single_word": False, "special": True}
        for text in SPECIAL
    }
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "bos_token": BOS,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS,
        "legacy": True,
        "model_max_length": max_length,
        "pad_token": None,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": UNK,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    special_map = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2, sort_keys=True) + "\n")


def make_weights(preset: "Preset", seed: int) -> dict[str, "mx.array"]:
    """The Qwen3 maker's weights under llama's names (no q/k norms), specials and bytes held far down."""
    import mlx.core as mx

    from mlxd.dev import synth

    weights = {name: w for name, w in synth.make_weights(preset, seed).items()
               if not name.endswith(("q_norm.weight", "k_norm.weight"))}
    head = weights["lm_head.weight"]
    d = preset.hidden_size
    n_held = len(SPECIAL) + N_BYTES
    # synth's output layer puts its text rows first; here the held rows come first, as llama numbers them.
    text_rows = head[: preset.vocab_size - n_held]
    held = mx.zeros((n_held, d))
    held[:, 0] = head[-1, 0]  # the same large negative weight on the constant channel
    weights["lm_head.weight"] = mx.concatenate([held, text_rows], axis=0)
    mx.eval(weights)
    return weights


def model_config(preset: "Preset", dtype: "Dtype") -> dict[str, object]:
    """config.json for LlamaForCausalLM with the given shape."""
    p = preset
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": SPECIAL.index(BOS),
        "eos_token_id": [SPECIAL.index(EOS), SPECIAL.index(EOT)],
        "head_dim": p.head_dim,
        "hidden_act": "silu",
        "hidden_size": p.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": p.intermediate_size,
        "max_position_embeddings": p.max_position_embeddings,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": p.num_attention_heads,
        "num_hidden_layers": p.num_hidden_layers,
        "num_key_value_heads": p.num_key_value_heads,
        "rms_norm_eps": p.rms_norm_eps,
        "rope_scaling": None,
        "rope_theta": p.rope_theta,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
        "use_cache": True,
        "vocab_size": p.vocab_size,
    }


def generation_config() -> dict[str, object]:
    """generation_config.json: the token ids only. A GGUF llama carries no sampling defaults, so none here."""
    return {"bos_token_id": SPECIAL.index(BOS), "eos_token_id": [SPECIAL.index(EOS), SPECIAL.index(EOT)],
            "do_sample": False}
