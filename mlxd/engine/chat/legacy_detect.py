"""Which of llama.cpp's built-in chat formats (engine.chat.legacy) a name or a Jinja template's text stands for.

Under ``--no-jinja`` libllama never runs a checkpoint's template: it matches the text by telltale substrings, in a
fixed order, and the first match names the format. This is that order.
"""

from __future__ import annotations

from collections.abc import Callable

from mlxd.engine.chat.legacy import FORMATS

# Telltale substrings of a Jinja template, in libllama's order of testing: the first match names the format.
_DETECT: list[tuple[Callable[[str], bool], str]] = [
    (lambda t: "<|im_start|>" in t and "<|im_sep|>" in t, "phi4"),
    (lambda t: "<|im_start|>" in t and "<end_of_utterance>" in t, "smolvlm"),
    (lambda t: "<|im_start|>" in t, "chatml"),
]


def _detect_mistral(t: str) -> str:
    if "[SYSTEM_PROMPT]" in t:
        return "mistral-v7"
    if "' [INST] ' + system_message" in t or "[AVAILABLE_TOOLS]" in t:
        if " [INST]" in t:
            return "mistral-v1"
        return "mistral-v3-tekken" if '"[INST]"' in t else "mistral-v3"
    if "content.strip()" in t:
        return "llama2-sys-strip"
    if "bos_token + '[INST]" in t:
        return "llama2-sys-bos"
    return "llama2-sys" if "<<SYS>>" in t else "llama2"


def _all(*needles: str) -> Callable[[str], bool]:
    return lambda t: all(n in t for n in needles)


_DETECT_REST: list[tuple[Callable[[str], bool], str]] = [
    (_all("<|assistant|>", "<|end|>"), "phi3"),
    (_all("[gMASK]<sop>"), "chatglm4"),
    (_all("<|assistant|>", "<|user|>", "<|tool_declare|>"), "exaone-moe"),
    (_all("<|assistant|>", "<|user|>", "</s>"), "falcon3"),
    (_all("<|assistant|>", "<|user|>"), "glmedge"),
    (_all("<|{{ item['role'] }}|>", "<|begin_of_image|>"), "glmedge"),
    (_all("<|user|>", "<|endoftext|>"), "zephyr"),
    (_all("bos_token + message['role']"), "monarch"),
    (_all("<start_of_turn>"), "gemma"),
    (_all("'\\n\\nAssistant: ' + eos_token"), "orion"),
    (_all("GPT4 Correct "), "openchat"),
    (_all("USER: ", "ASSISTANT: ", "SYSTEM: "), "vicuna-orca"),
    (_all("USER: ", "ASSISTANT: "), "vicuna"),
    (_all("### Instruction:", "<|EOT|>"), "deepseek"),
    (_all("<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"), "command-r"),
    (_all("<|start_header_id|>", "<|end_header_id|>"), "llama3"),
    (_all("[gMASK]sop"), "chatglm3"),
    (_all("<用户>"), "minicpm"),
    (_all("'Assistant: ' + message['content'] + eos_token"), "deepseek2"),
    (_all("<｜Assistant｜>", "<｜User｜>", "<｜end▁of▁sentence｜>"), "deepseek3"),
    (_all("[|system|]", "[|assistant|]", "[|endofturn|]", "[|tool|]"), "exaone4"),
    (_all("[|system|]", "[|assistant|]", "[|endofturn|]"), "exaone3"),
    (lambda t: "rwkv-world" in t or "{{- 'User: ' + message['content']|trim + '\\n\\n' -}}" in t, "rwkv-world"),
    (lambda t: "<|start_of_role|>" in t and ("<tool_call>" in t or "<tools>" in t)
     and "g4_default_system_message" in t, "granite-4.0"),
    (lambda t: "<|start_of_role|>" in t and ("<tool_call>" in t or "<tools>" in t), "granite-4.1"),
    (_all("<|start_of_role|>"), "granite"),
    (_all("message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]"),
     "gigachat"),
    (_all("<|role_start|>"), "megrez"),
    (_all(" Ассистент:"), "yandex"),
    (_all("<role>ASSISTANT</role>", "'HUMAN'"), "bailing"),
    (_all("<role>ASSISTANT</role>", '"HUMAN"', "<think>"), "bailing-think"),
    (_all("<role>ASSISTANT</role>", "<role>HUMAN</role>", "<|role_end|>"), "bailing2"),
    (_all("<|header_start|>", "<|header_end|>"), "llama4"),
    (_all("<|endofuserprompt|>"), "dots1"),
    (_all("<|extra_0|>", "<|extra_4|>"), "hunyuan-moe"),
    (_all("<|start|>", "<|channel|>"), "gpt-oss"),
    (_all("<｜hy_Assistant｜>", "<｜hy_begin▁of▁sentence｜>"), "hunyuan-vl"),
    (_all("<｜hy_Assistant｜>", "<｜hy_place▁holder▁no▁3｜>"), "hunyuan-dense"),
    (_all("<|im_assistant|>assistant<|im_middle|>"), "kimi-k2"),
    (_all("<seed:bos>"), "seed_oss"),
    (_all("'Assistant: '  + message['content'] + '<|separator|>"), "grok-2"),
    (_all("[unused9]系统：[unused10]"), "pangu-embedded"),
    (_all("<|begin|>", "<|end|>", "<|content|>"), "solar-open"),
]


def detect_format(template: str) -> str | None:
    """The built-in format a name or a Jinja template's text stands for, as libllama detects it; None if none."""
    if template in FORMATS and template != "dots1":
        return template
    for test, name in _DETECT:
        if test(template):
            return name
    if template.startswith("mistral") or "[INST]" in template:
        return _detect_mistral(template)
    for test, name in _DETECT_REST:
        if test(template):
            return name
    return None
