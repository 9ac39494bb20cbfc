"""Which tool-call format a model writes, from its chat template's text, as llama-server's chat layer detects it
(common/chat.cpp): by the markers the template writes for an assistant's calls, in an order that lets the more
specific markers win."""

from __future__ import annotations

from mlxd.engine.chat.formats import FORMATS, HERMES, ToolFormat


def detect_tool_format(source: str) -> ToolFormat | None:
    """The format a model served with this template writes its calls in; None for Llama 3.x's bare JSON."""
    def has(*needles: str) -> bool:
        return all(n in source for n in needles)

    if has("<|channel|>"):
        return FORMATS["gpt-oss"]
    if has("]<]minimax[>[", "<tool_call>", "<invoke name="):
        return FORMATS["minimax-m3"]
    if has("<|open|>", "<|close|>", "<|end_of_msg|>"):
        return FORMATS["kimi-k3"]
    if has("<tool_sep{}>", "<arg_key{}>"):  # Hy3 spells its markers '<tool_sep{}>'.format(':opensource')
        return FORMATS["hy3"]
    if has("<|tool_call:begin|>", "<|tool_call:name|>"):
        return FORMATS["solar-open"]
    if has("Tool usage guidelines:", '<function name="', '<param name="'):
        return FORMATS["minicpm5"]
    if has("<tool_calls>", "</tool_calls>"):
        return FORMATS["minimax-m1" if "ai name=assistant" in source else "apriel"]
    if has("[TOOL_CALLS]"):
        return FORMATS["mistral" if "[ARGS]" in source else "mistral-v3"]
    if has("dsml_token", "DSML"):
        return FORMATS["deepseek-v3.2"]
    if has("<seed:tool_call>"):
        return FORMATS["seed-oss"]
    if has("<tool_call>", "<function=", "<parameter="):
        return FORMATS["qwen3-coder"]
    if has("<|tool_calls_section_begin|>"):
        return FORMATS["kimi-k2"]
    if has("<minimax:tool_call>"):
        return FORMATS["minimax-m2"]
    if has("<arg_key>", "<arg_value>"):
        return FORMATS["glm"]
    if has("<｜tool▁calls▁begin｜>"):
        return FORMATS["deepseek-r1" if "```json" in source else "deepseek-v3.1"]
    if has("<|START_ACTION|>"):
        return FORMATS["command-r7b"]
    if has("'<|tool_call>call:'") or has("<|tool_call>call:"):
        return FORMATS["gemma4"]
    if has("<|tools_prefix|>"):
        return FORMATS["apertus"]
    if has("<|tool_call_start|>"):
        return FORMATS["lfm2"]
    if has("<TOOLCALL>"):
        return FORMATS["nemotron-v2"]
    if has(">>>all"):
        return FORMATS["functionary-v3.2"]
    if has("<function=", "<|python_tag|>") or has("<function=", "</function>"):
        return FORMATS["functionary-v3.1"]
    if has("<|tool_call|>"):
        return FORMATS["granite"]
    llama = "<|start_header_id|>" in source and ("<|python_tag|>" in source or '"parameters"' in source)
    if llama and "<tool_call>" not in source:
        return None
    return HERMES
