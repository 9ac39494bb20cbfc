"""llama.cpp's built-in chat formats (``--chat-template NAME``, and every template under ``--no-jinja``, which
engine.chat.legacy_detect matches to one of them).

llama-server keeps these as fixed C++ formatters in libllama (src/llama-chat.cpp): a name picks one, and under
``--no-jinja`` a checkpoint's Jinja text is never run but matched by telltale substrings to one of them. They are
written again here as plain Python (each a few lines of string building, which a Jinja rendering would only
obscure), with the same output for the same messages: only ``role`` and text ``content`` count, tool calls are not
shown, and no system prompt is moved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Turn = tuple[str, str]  # (role, content)
Format = Callable[[Sequence[Turn], bool], str]

_SPACE = " \t\n\r\f\v"  # C isspace, what libllama's trim() strips


def _trim(text: str) -> str:
    return text.strip(_SPACE)


def _chatml(chat: Sequence[Turn], add: bool) -> str:
    return "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in chat) + ("<|im_start|>assistant\n" if add else "")


def _mistral_v7(space: str) -> Format:
    def render(chat: Sequence[Turn], add: bool) -> str:
        out = []
        for role, content in chat:
            if role == "system":
                out.append(f"[SYSTEM_PROMPT]{space}{content}[/SYSTEM_PROMPT]")
            elif role == "user":
                out.append(f"[INST]{space}{content}[/INST]")
            else:
                out.append(f"{space}{content}</s>")
        return "".join(out)
    return render


def _mistral_v1_v3(leading: str, trailing: str, trim_assistant: bool) -> Format:
    def render(chat: Sequence[Turn], add: bool) -> str:
        out, inside = [], False
        for role, content in chat:
            if not inside:
                out.append(f"{leading}[INST]{trailing}")
                inside = True
            if role == "system":
                out.append(content + "\n\n")
            elif role == "user":
                out.append(f"{content}{leading}[/INST]")
            else:
                out.append(f"{trailing}{_trim(content) if trim_assistant else content}</s>")
                inside = False
        return "".join(out)
    return render


def _llama2(system: bool, bos_inside: bool, strip: bool) -> Format:
    def render(chat: Sequence[Turn], add: bool) -> str:
        out, inside = ["[INST] "], True
        for role, content in chat:
            content = _trim(content) if strip else content
            if not inside:
                inside = True
                out.append("<s>[INST] " if bos_inside else "[INST] ")
            if role == "system":
                out.append(f"<<SYS>>\n{content}\n<</SYS>>\n\n" if system else content + "\n")
            elif role == "user":
                out.append(content + " [/INST]")
            else:
                out.append(content + "</s>")
                inside = False
        return "".join(out)
    return render


def _each(turn: Callable[[str, str], str], generation: str = "") -> Format:
    """A format that writes every message the same way, then the generation prompt."""
    return lambda chat, add: "".join(turn(r, c) for r, c in chat) + (generation if add else "")


def _by_role(turns: dict[str, Callable[[str], str]], generation: str = "", prefix: str = "") -> Format:
    """A format with one shape per role; a role it does not name is left out."""
    return lambda chat, add: prefix + "".join(
        turns[r](c) for r, c in chat if r in turns) + (generation if add else "")


def _gemma(chat: Sequence[Turn], add: bool) -> str:
    out, system = [], ""
    for role, content in chat:
        if role == "system":
            system += _trim(content)
            continue
        role = "model" if role == "assistant" else role
        out.append(f"<start_of_turn>{role}\n")
        if system and role != "model":
            out.append(system + "\n\n")
            system = ""
        out.append(_trim(content) + "<end_of_turn>\n")
    return "".join(out) + ("<start_of_turn>model\n" if add else "")


def _orion(chat: Sequence[Turn], add: bool) -> str:
    out, system = [], ""
    for role, content in chat:
        if role == "system":
            system += content
        elif role == "user":
            out.append("Human: " + (system + "\n\n" if system else "") + content + "\n\nAssistant: </s>")
            system = ""
        else:
            out.append(content + "</s>")
    return "".join(out)


def _openchat(chat: Sequence[Turn], add: bool) -> str:
    out = [c + "<|end_of_turn|>" if r == "system" else f"GPT4 Correct {r[:1].upper()}{r[1:]}: {c}<|end_of_turn|>"
           for r, c in chat]
    return "".join(out) + ("GPT4 Correct Assistant:" if add else "")


def _vicuna(orca: bool) -> Format:
    return _by_role({"system": (lambda c: f"SYSTEM: {c}\n") if orca else (lambda c: c + "\n\n"),
                     "user": lambda c: f"USER: {c}\n", "assistant": lambda c: f"ASSISTANT: {c}</s>\n"},
                    "ASSISTANT:")


def _monarch(chat: Sequence[Turn], add: bool) -> str:
    out = [("" if i == 0 else "<s>") + f"{r}\n{c}</s>\n" for i, (r, c) in enumerate(chat)]
    return "".join(out) + ("<s>assistant\n" if add else "")


def _minicpm(chat: Sequence[Turn], add: bool) -> str:
    return "".join(f"<用户>{_trim(c)}<AI>" if r == "user" else _trim(c) for r, c in chat)


def _rwkv(chat: Sequence[Turn], add: bool) -> str:
    out = []
    for i, (role, content) in enumerate(chat):
        if role == "system":
            out.append(f"System: {_trim(content)}\n\n")
        elif role == "user":
            out.append(f"User: {_trim(content)}\n\n" + ("Assistant:" if i == len(chat) - 1 else ""))
        elif role == "assistant":
            out.append(f"Assistant: {_trim(content)}\n\n")
    return "".join(out)


def _granite(chat: Sequence[Turn], add: bool) -> str:
    out = [f"<|start_of_role|>{r}<|end_of_role|>" + ("<|tool_call|>" if r == "assistant_tool_call" else "")
           + c + "<|end_of_text|>\n" for r, c in chat]
    return "".join(out) + ("<|start_of_role|>assistant<|end_of_role|>" if add else "")


def _granite4(chat: Sequence[Turn], add: bool) -> str:
    out = [("<|start_of_role|>assistant<|end_of_role|><|tool_call|>" if r == "assistant_tool_call"
            else f"<|start_of_role|>{r}<|end_of_role|>") + c + "<|end_of_text|>\n" for r, c in chat]
    return "".join(out) + ("<|start_of_role|>assistant<|end_of_role|>" if add else "")


def _gigachat(chat: Sequence[Turn], add: bool) -> str:
    has_system = bool(chat) and chat[0][0] == "system"
    out = ["<s>" + (chat[0][1] + "<|message_sep|>" if has_system else "")]
    for role, content in chat[1 if has_system else 0:]:
        if role == "user":
            out.append(f"user<|role_sep|>{content}<|message_sep|>available functions<|role_sep|>[]<|message_sep|>")
        elif role == "assistant":
            out.append(f"assistant<|role_sep|>{content}<|message_sep|>")
    return "".join(out) + ("assistant<|role_sep|>" if add else "")


def _bailing_role(role: str) -> str:
    return "HUMAN" if role == "user" else role.upper()


def _bailing(think: bool) -> Format:
    return lambda chat, add: "".join(f"<role>{_bailing_role(r)}</role>{c}" for r, c in chat) + (
        "<role>ASSISTANT</role>" + ("<think>" if think else "") if add else "")


def _bailing2(chat: Sequence[Turn], add: bool) -> str:
    opening = "" if chat and chat[0][0] == "system" else "<role>SYSTEM</role>detailed thinking off<|role_end|>"
    return opening + "".join(f"<role>{_bailing_role(r)}</role>{c}<|role_end|>" for r, c in chat) + (
        "<role>ASSISTANT</role>" if add else "")


def _smolvlm(chat: Sequence[Turn], add: bool) -> str:
    out = ["<|im_start|>"]
    for role, content in chat:
        if role == "system":
            out.append(content + "\n\n")
        elif role == "user":
            out.append(f"User: {content}<end_of_utterance>\n")
        else:
            out.append(f"Assistant: {content}<end_of_utterance>\n")
    return "".join(out) + ("Assistant:" if add else "")


def _hunyuan_moe(chat: Sequence[Turn], add: bool) -> str:
    return "".join(f"<|startoftext|>{c}<|extra_4|>" if r == "system" else f"{c}<|eos|>" if r == "assistant"
                   else f"<|startoftext|>{c}<|extra_0|>" for r, c in chat)


def _hunyuan_dense(chat: Sequence[Turn], add: bool) -> str:
    out = []
    for i, (role, content) in enumerate(chat):
        if i == 0 and role == "system":
            out.append(content + "<｜hy_place▁holder▁no▁3｜>")
        if role == "assistant":
            out.append(f"<｜hy_Assistant｜>{content}<｜hy_place▁holder▁no▁2｜>")
        elif role == "user":
            out.append(f"<｜hy_User｜>{content}<｜hy_Assistant｜>")
    return "".join(out)


def _hunyuan_vl(chat: Sequence[Turn], add: bool) -> str:
    out = ["<｜hy_begin▁of▁sentence｜>"]
    for i, (role, content) in enumerate(chat):
        if i == 0 and role == "system":
            out.append(content + "<｜hy_place▁holder▁no▁3｜>")
        elif role == "user":
            out.append(content + "<｜hy_User｜>")
        elif role == "assistant":
            out.append(content + "<｜hy_Assistant｜>")
    return "".join(out)


_KIMI_OPEN = {"system": "<|im_system|>system<|im_middle|>", "user": "<|im_user|>user<|im_middle|>",
              "assistant": "<|im_assistant|>assistant<|im_middle|>", "tool": "<|im_system|>tool<|im_middle|>"}


def _kimi_k2(chat: Sequence[Turn], add: bool) -> str:
    return "".join(_KIMI_OPEN.get(r, "") + c + "<|im_end|>" for r, c in chat) + (
        _KIMI_OPEN["assistant"] if add else "")


_PANGU = {"system": "系统", "user": "用户", "assistant": "助手", "tool": "工具", "function": "方法"}


def _pangu(chat: Sequence[Turn], add: bool) -> str:
    out = ["[unused9]系统：[unused10]" if chat and chat[0][0] != "system" else ""]
    out += [f"[unused9]{_PANGU[r]}：{c}[unused10]" for r, c in chat if r in _PANGU]
    return "".join(out) + ("[unused9]助手：" if add else "")


def _trimmed(open_: str, close: str) -> Callable[[str], str]:
    """A turn: ``open_``, the trimmed content, ``close``."""
    return lambda c: open_ + _trim(c) + close


def _exaone(tags: dict[str, tuple[str, str]], generation: str) -> Format:
    return _by_role({role: _trimmed(o, e) for role, (o, e) in tags.items()}, generation)


_EXAONE3 = {"system": ("[|system|]", "[|endofturn|]\n"), "user": ("[|user|]", "\n"),
            "assistant": ("[|assistant|]", "[|endofturn|]\n")}

# Name -> format, for every name b10621's --chat-template lists (and dots1, which only detection reaches).
FORMATS: dict[str, Format] = {
    "chatml": _chatml,
    "llama2": _llama2(False, False, False),
    "llama2-sys": _llama2(True, False, False),
    "llama2-sys-bos": _llama2(True, True, False),
    "llama2-sys-strip": _llama2(True, False, True),
    "mistral-v1": _mistral_v1_v3(" ", " ", False),
    "mistral-v3": _mistral_v1_v3("", " ", True),
    "mistral-v3-tekken": _mistral_v1_v3("", "", False),
    "mistral-v7": _mistral_v7(" "),
    "mistral-v7-tekken": _mistral_v7(""),
    "phi3": _each(lambda r, c: f"<|{r}|>\n{c}<|end|>\n", "<|assistant|>\n"),
    "phi4": _each(lambda r, c: f"<|im_start|>{r}<|im_sep|>{c}<|im_end|>", "<|im_start|>assistant<|im_sep|>"),
    "falcon3": _each(lambda r, c: f"<|{r}|>\n{c}\n", "<|assistant|>\n"),
    "zephyr": _each(lambda r, c: f"<|{r}|>\n{c}<|endoftext|>\n", "<|assistant|>\n"),
    "monarch": _monarch,
    "gemma": _gemma,
    "orion": _orion,
    "openchat": _openchat,
    "vicuna": _vicuna(False),
    "vicuna-orca": _vicuna(True),
    "deepseek": _by_role({"system": lambda c: c, "user": lambda c: f"### Instruction:\n{c}\n",
                          "assistant": lambda c: f"### Response:\n{c}\n<|EOT|>\n"}, "### Response:\n"),
    "deepseek2": _by_role({"system": lambda c: c + "\n\n", "user": lambda c: f"User: {c}\n\n",
                           "assistant": lambda c: f"Assistant: {c}<｜end▁of▁sentence｜>"}, "Assistant:"),
    "deepseek3": _by_role({"system": lambda c: c + "\n\n", "user": lambda c: f"<｜User｜>{c}",
                           "assistant": lambda c: f"<｜Assistant｜>{c}<｜end▁of▁sentence｜>"}, "<｜Assistant｜>"),
    "deepseek-ocr": lambda chat, add: "".join(c for _, c in chat),
    "command-r": _by_role({
        role: _trimmed(f"<|START_OF_TURN_TOKEN|><|{token}_TOKEN|>", "<|END_OF_TURN_TOKEN|>")
        for role, token in (("system", "SYSTEM"), ("user", "USER"), ("assistant", "CHATBOT"))},
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"),
    "llama3": _each(lambda r, c: f"<|start_header_id|>{r}<|end_header_id|>\n\n{_trim(c)}<|eot_id|>",
                    "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    "chatglm3": lambda chat, add: "[gMASK]sop" + "".join(f"<|{r}|>\n {c}" for r, c in chat) + (
        "<|assistant|>" if add else ""),
    "chatglm4": lambda chat, add: "[gMASK]<sop>" + "".join(f"<|{r}|>\n{c}" for r, c in chat) + (
        "<|assistant|>\n" if add else ""),
    "glmedge": _each(lambda r, c: f"<|{r}|>\n{c}", "<|assistant|>"),
    "minicpm": _minicpm,
    "exaone3": _exaone(_EXAONE3, "[|assistant|]"),
    "exaone4": _exaone({**_EXAONE3, "tool": ("[|tool|]", "[|endofturn|]\n")}, "[|assistant|]"),
    "exaone-moe": _exaone({r: (f"<|{r}|>\n", "<|endofturn|>\n") for r in ("system", "user", "assistant", "tool")},
                          "<|assistant|>\n"),
    "rwkv-world": _rwkv,
    "granite": _granite,
    "granite-4.0": _granite4,
    "granite-4.1": _granite4,
    "gigachat": _gigachat,
    "megrez": _each(lambda r, c: f"<|role_start|>{r}<|role_end|>{c}<|turn_end|>",
                    "<|role_start|>assistant<|role_end|>"),
    "yandex": _by_role({"user": lambda c: f" Пользователь: {c}\n\n", "assistant": lambda c: f" Ассистент: {c}\n\n"},
                       " Ассистент:[SEP]"),
    "bailing": _bailing(False),
    "bailing-think": _bailing(True),
    "bailing2": _bailing2,
    "llama4": _each(lambda r, c: f"<|header_start|>{r}<|header_end|>\n\n{_trim(c)}<|eot|>",
                    "<|header_start|>assistant<|header_end|>\n\n"),
    "smolvlm": _smolvlm,
    "dots1": lambda chat, add: "".join(
        f"<|system|>{c}<|endofsystem|>" if r == "system" else f"<|userprompt|>{c}<|endofuserprompt|>"
        if r == "user" else f"<|response|>{c}<|endofresponse|>" for r, c in chat) + ("<|response|>" if add else ""),
    "hunyuan-moe": _hunyuan_moe,
    "gpt-oss": _each(lambda r, c: f"<|start|>{r}<|message|>{c}" + ("<|return|>" if r == "assistant" else "<|end|>"),
                     "<|start|>assistant"),
    "hunyuan-dense": _hunyuan_dense,
    "hunyuan-vl": _hunyuan_vl,
    "kimi-k2": _kimi_k2,
    "seed_oss": _each(lambda r, c: f"<seed:bos>{r}\n{_trim(c) if r == 'assistant' else c}<seed:eos>",
                      "<seed:bos>assistant\n"),
    "grok-2": _by_role({"system": lambda c: f"System: {_trim(c)}<|separator|>\n\n",
                        "user": lambda c: f"Human: {_trim(c)}<|separator|>\n\n",
                        "assistant": lambda c: f"Assistant: {c}<|separator|>\n\n"}, "Assistant:"),
    "pangu-embedded": _pangu,
    "solar-open": _each(lambda r, c: f"<|begin|>{r}<|content|>{c}<|end|>", "<|begin|>assistant"),
}

def render_format(name: str, chat: Sequence[Turn], add_generation_prompt: bool) -> str:
    """The prompt the built-in format ``name`` makes of ``chat``."""
    return FORMATS[name](chat, add_generation_prompt)
