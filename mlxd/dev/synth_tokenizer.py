"""The tokenizer of synthetic checkpoints: a byte-level BPE trained on the Python standard library's sources.

Every machine that runs mlxd has those sources, so a checkpoint can be made offline. The special tokens, the
chat template and the file layout follow Qwen3's, so chat rendering, reasoning and tool-call parsing can be
exercised against a synthetic checkpoint exactly as against a real one.
"""

from __future__ import annotations

import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

# Qwen2/Qwen3's pre-tokenization split (contractions, letters, single digits, punctuation runs, newlines, spaces).
_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# (content, special): special tokens are dropped by skip_special_tokens; the reasoning and tool markers are not,
# as in Qwen3, so that they survive decoding and can be parsed out of the text.
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|fim_prefix|>", True),
    ("<|fim_middle|>", True),
    ("<|fim_suffix|>", True),
    ("<|fim_pad|>", True),
    ("<|repo_name|>", True),
    ("<|file_sep|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
BOS_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"

# A template that renders Qwen3's chat format: system and tool declarations first, reasoning kept only for the
# turns after the last user query, tool results grouped into one user turn, and `enable_thinking=false` closing
# an empty reasoning block in the generation prompt.
CHAT_TEMPLATE = """\
{%- set ns = namespace(last_query=messages|length - 1, found=false) -%}
{%- for message in messages[::-1] -%}
  {%- if not ns.found and message.role == 'user' and not (message.content is string
        and message.content.startswith('<tool_response>')) -%}
    {%- set ns.last_query = messages|length - 1 - loop.index0 -%}
    {%- set ns.found = true -%}
  {%- endif -%}
{%- endfor -%}
{%- if tools -%}
  {{- '<|im_start|>system\\n' -}}
  {%- if messages[0].role == 'system' -%}{{- messages[0].content + '\\n\\n' -}}{%- endif -%}
  {{- '# Tools\\n\\nFunctions you may call to help with the request are listed, one JSON signature per line, '
      'inside <tools></tools>:\\n<tools>' -}}
  {%- for tool in tools -%}{{- '\\n' + tool | tojson -}}{%- endfor -%}
  {{- '\\n</tools>\\n\\nTo call a function, write a JSON object with its name and arguments between '
      '<tool_call></tool_call> tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": '
      '<args-json-object>}\\n</tool_call><|im_end|>\\n' -}}
{%- elif messages[0].role == 'system' -%}
  {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
  {%- set content = message.content if message.content is string else '' -%}
  {%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}
    {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' -}}
  {%- elif message.role == 'assistant' -%}
    {%- set reasoning = message.reasoning_content if message.reasoning_content is string else '' -%}
    {%- if not reasoning and '</think>' in content -%}
      {%- set reasoning = content.split('</think>')[0].split('<think>')[-1] -%}
      {%- set content = content.split('</think>')[-1].lstrip('\\n') -%}
    {%- endif -%}
    {{- '<|im_start|>assistant\\n' -}}
    {%- if loop.index0 > ns.last_query and (loop.last or reasoning) -%}
      {{- '<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' -}}
    {%- endif -%}
    {{- content -}}
    {%- for tool_call in message.tool_calls or [] -%}
      {%- if tool_call.function is defined -%}{%- set tool_call = tool_call.function -%}{%- endif -%}
      {%- if not loop.first or content -%}{{- '\\n' -}}{%- endif -%}
      {{- '<tool_call>\\n{\\"name\\": \\"' + tool_call.name + '\\", \\"arguments\\": ' -}}
      {%- if tool_call.arguments is string -%}{{- tool_call.arguments -}}
      {%- else -%}{{- tool_call.arguments | tojson -}}{%- endif -%}
      {{- '}\\n</tool_call>' -}}
    {%- endfor -%}
    {{- '<|im_end|>\\n' -}}
  {%- elif message.role == 'tool' -%}
    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
    {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' -}}
    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\\n' -}}
  {%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}
{%- endif -%}
"""


@dataclass(frozen=True)
class CorpusInfo:
    """What the tokenizer was trained on, recorded in the checkpoint so a difference can be explained."""

    root: str
    files: int
    chars: int


def stdlib_corpus(max_chars: int) -> tuple[list[str], CorpusInfo]:
    """The top-level ``.py`` files of the standard library, in sorted order, up to about ``max_chars``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    texts: list[str] = []
    total = 0
    for path in sorted(root.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        total += len(text)
        if total >= max_chars:
            break
    if not texts:
        raise RuntimeError(f"no Python sources found under {root} to train a tokenizer on")
    return texts, CorpusInfo(root=str(root), files=len(texts), chars=total)


def train_tokenizer(vocab_size: int, max_chars: int = 2_000_000) -> tuple[Tokenizer, CorpusInfo]:
    """Train a byte-level BPE of ``vocab_size`` tokens in all, the added tokens last (as Qwen numbers them)."""
    texts, info = stdlib_corpus(max_chars)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(ADDED_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.add_tokens(
        [AddedToken(text, special=special, normalized=False) for text, special in ADDED_TOKENS]
    )
    if tokenizer.get_vocab_size() != vocab_size:
        raise RuntimeError(
            f"the corpus ({info.chars} characters) only supports {tokenizer.get_vocab_size()} tokens, "
            f"not {vocab_size}"
        )
    return tokenizer, info


def added_token_ids(tokenizer: Tokenizer) -> dict[str, int]:
    """The id of every added token."""
    ids = {text: tokenizer.token_to_id(text) for text, _ in ADDED_TOKENS}
    return {text: i for text, i in ids.items() if i is not None}


def write_tokenizer_files(tokenizer: Tokenizer, out_dir: Path, *, max_length: int) -> None:
    """Write tokenizer.json and a Qwen-style tokenizer_config.json (special tokens, chat template)."""
    tokenizer.save(str(out_dir / "tokenizer.json"), pretty=False)
    ids = added_token_ids(tokenizer)
    decoder = {
        str(ids[text]): {
            "content": text,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for text, special in ADDED_TOKENS
    }
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [text for text, special in ADDED_TOKENS if special and text != BOS_TOKEN],
        "bos_token": BOS_TOKEN,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "errors": "replace",
        "model_max_length": max_length,
        "pad_token": PAD_TOKEN,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    special_map = {"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2, sort_keys=True) + "\n")
