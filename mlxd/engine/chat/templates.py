"""Chat templates: where a checkpoint's Jinja template comes from, and rendering it as llama-server does.

Rendering happens in engine.chat.jinja_env's runtime; the built-in names and --no-jinja in engine.chat.legacy (and
legacy_detect).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2

from mlxd.engine.chat.caps import TemplateCaps, detect_caps
from mlxd.engine.chat.errors import ChatTemplateError
from mlxd.engine.chat.jinja_env import TemplateRaised, compile_template
from mlxd.engine.chat.legacy import FORMATS, render_format
from mlxd.engine.chat.legacy_detect import detect_format

# llama-server b10621's built-in template names (its --chat-template help), each served by the format of that name
# (engine.chat.legacy). A value equal to one of them is a name, never template text: under --jinja b10621 would
# render "llama3" literally and answer every chat with the word "llama3"; mlxd serves the format the name means.
UPSTREAM_TEMPLATE_NAMES: frozenset[str] = frozenset(name for name in FORMATS if name != "dots1")

# chatml is also a Jinja text, the fallback for a checkpoint without a template, as upstream falls back to it.
BUILTIN_TEMPLATES: dict[str, str] = {
    "chatml": (
        "{%- for message in messages -%}\n"
        "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\n"
        "{%- endfor -%}\n"
        "{%- if add_generation_prompt -%}\n"
        "{{- '<|im_start|>assistant\\n' -}}\n"
        "{%- endif -%}"
    ),
}

# What a built-in format can express: string content and a system role, nothing of tools or reasoning.
_BUILTIN_CAPS = TemplateCaps(supports_string_content=True, supports_system_role=True)

THINK_OPEN = "<think>"


def resolve_template(text: str, origin: str, *, jinja: bool = True) -> tuple[str, str | None]:
    """``(source, builtin)``: the template text to serve and the built-in format that renders it, if one does.

    With ``jinja`` a built-in name (``llama3``) picks its format and any other text is Jinja, rendered as written
    (llama-server renders text without any Jinja markup literally too). Without ``jinja`` (``--no-jinja``) nothing
    is run as Jinja: a name, or the telltale substrings of a template's text, pick a built-in format as libllama
    picks one, and a template that matches none is refused with the reason.
    """
    name = text.strip()
    if jinja:
        if name == "chatml":
            return BUILTIN_TEMPLATES["chatml"], None
        if name in UPSTREAM_TEMPLATE_NAMES:
            return name, name
        return text, None
    builtin = name if name in UPSTREAM_TEMPLATE_NAMES else detect_format(text)
    if builtin is None:
        raise ChatTemplateError(
            f"the chat template ({origin}) is not supported without Jinja: it matches none of llama.cpp's built-in "
            f"formats, which are all --no-jinja serves; leave --jinja on, or give --chat-template one of: "
            f"{', '.join(sorted(UPSTREAM_TEMPLATE_NAMES))}"
        )
    return (BUILTIN_TEMPLATES["chatml"] if name == "chatml" else text), builtin


class ChatTemplate:
    """A checkpoint's chat template (and its optional ``tool_use`` variant), ready to render."""

    def __init__(
        self,
        source: str,
        *,
        bos_token: str = "",
        eos_token: str = "",
        tool_use_source: str | None = None,
        origin: str = "inline text",
        jinja: bool = True,
    ) -> None:
        self.source, self.builtin = resolve_template(source, origin, jinja=jinja)
        self.jinja = jinja
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.origin = origin
        # A built-in format is plain Python: nothing is compiled, and a tool_use variant has no use (no tools).
        self.tool_use_source = tool_use_source if self.builtin is None else None
        self._default = compile_template(self.source, origin) if self.builtin is None else None
        self._tool_use = compile_template(self.tool_use_source, f"{origin}, tool_use") if self.tool_use_source else None
        self._supports_thinking: bool | None = False if self.builtin else None
        self._caps: TemplateCaps | None = _BUILTIN_CAPS if self.builtin else None
        self._markup: tuple[tuple[str, str], tuple[str, str]] | None = None

    @property
    def has_tool_use_variant(self) -> bool:
        return self._tool_use is not None

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        context: Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> str:
        """Render ``messages`` (already in template shape); ``tools`` stays undefined when empty or None."""
        if self.builtin is not None:
            turns = [(str(m["role"]), _text(m.get("content"))) for m in messages]
            return render_format(self.builtin, turns, add_generation_prompt)
        when = now or datetime.now()
        variables: dict[str, Any] = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            # llama-server's extra context, which some templates (Llama 3.x) read for the knowledge date line.
            "datetime": when.strftime("%b %d %Y"),
            "date_string": when.strftime("%d %b %Y"),
            "strftime_now": when.strftime,
        }
        variables.update(context or {})
        variables["messages"] = copy.deepcopy([dict(m) for m in messages])
        # As llama-server: the flag is set only when true; a false one leaves the variable undefined.
        if add_generation_prompt:
            variables["add_generation_prompt"] = True
        template = self._default
        assert template is not None  # only a built-in format has none, and it returned above
        if tools:
            variables["tools"] = copy.deepcopy([dict(t) for t in tools])
            if self._tool_use is not None:
                template = self._tool_use
        try:
            return template.render(variables)
        # The message names the template (a checkpoint's file, or the option that gave it): the words are the
        # template's own, with llama-server's "Jinja Exception" prefix for what raise_exception says.
        except TemplateRaised as exc:
            raise ChatTemplateError(
                f"Jinja Exception: {exc.message or 'the template raised an exception'} "
                f"(chat template: {self.origin})") from exc
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"chat template error ({self.origin}): {exc}") from exc
        # A template is a program from the checkpoint: any error it makes (a str + dict, a bad index) is its own,
        # and becomes the same typed error rather than a traceback.
        except Exception as exc:  # noqa: BLE001
            raise ChatTemplateError(
                f"chat template error ({self.origin}): {type(exc).__name__}: {exc}") from exc

    @property
    def caps(self) -> TemplateCaps:
        """What the template can express (probed once, on first use)."""
        if self._caps is None:
            fixed = datetime(2000, 1, 1)
            self._caps = detect_caps(
                lambda messages, tools, context: self.render(messages, tools=tools, context=context, now=fixed))
        return self._caps

    @property
    def supports_thinking(self) -> bool:
        """Whether the template reacts to ``enable_thinking`` or speaks ``<think>`` (``--reasoning auto``)."""
        if self._supports_thinking is None:
            self._supports_thinking = (THINK_OPEN in self.source or "<|channel|>" in self.source
                                       or self._renders_differently_with_thinking())
        return self._supports_thinking

    def reasoning_markup(self, tags: tuple[str, str]) -> tuple[str, str]:
        """How this template writes an earlier turn's reasoning around its text: its opening and closing tags with
        the whitespace it puts beside them (Qwen3: ``"<think>\\n"`` and ``"\\n</think>\\n\\n"``), which a continued
        message is written with; the bare tags when the template does not show reasoning."""
        if self._markup is None or self._markup[0] != tags:
            found = tags
            reasoning, content = "mlxd_reasoning_probe", "mlxd_content_probe"
            probe = [{"role": "user", "content": "q"},
                     {"role": "assistant", "content": content, "reasoning_content": reasoning}]
            try:
                text = self.render(probe, add_generation_prompt=False, now=datetime(2000, 1, 1))
            except ChatTemplateError:
                text = ""
            at, end = text.find(reasoning), text.find(content)
            opening = text.rfind(tags[0], 0, at) if at >= 0 else -1
            if opening >= 0 and end > at and tags[1] in text[at:end]:
                found = (text[opening:at], text[at + len(reasoning):end])
            self._markup = (tags, found)
        return self._markup[1]

    def _renders_differently_with_thinking(self) -> bool:
        """Whether ``enable_thinking`` changes the assistant's turn (what follows the user's message): a template
        that only words its system preamble differently (Apertus' "Deliberation") has no reasoning block for
        llama-server, which looks for one where the answer starts."""
        marker = "mlxd_thinking_probe"
        probe = [{"role": "user", "content": marker}]
        fixed = datetime(2000, 1, 1)
        try:
            on = self.render(probe, context={"enable_thinking": True}, now=fixed)
            off = self.render(probe, context={"enable_thinking": False}, now=fixed)
        except ChatTemplateError:
            return False
        if marker not in on or marker not in off:
            return on != off
        return on[on.rindex(marker):] != off[off.rindex(marker):]


def _text(content: Any) -> str:
    """A message's text as a built-in format takes it: parts joined by newlines, as libllama's caller joins them."""
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return "" if content is None else str(content)


def _token_text(value: Any) -> str:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken object."""
    if isinstance(value, str):
        return value
    content = value.get("content") if isinstance(value, Mapping) else None
    return content if isinstance(content, str) else ""


def _named_templates(value: Any, origin: str) -> tuple[str | None, str | None]:
    """(default, tool_use) from a ``chat_template`` value: a string, or a list of ``{name, template}``."""
    if value is None:
        return None, None
    if isinstance(value, str):
        return value, None
    if isinstance(value, list):
        named: dict[str, str] = {}
        for entry in value:
            if not (isinstance(entry, Mapping) and isinstance(entry.get("name"), str)
                    and isinstance(entry.get("template"), str)):
                raise ChatTemplateError(f"{origin}: chat_template list entries need string 'name' and 'template'")
            named[entry["name"]] = entry["template"]
        return named.get("default"), named.get("tool_use")
    raise ChatTemplateError(f"{origin}: chat_template must be a string or a list of named templates")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ChatTemplateError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ChatTemplateError(f"{path}: expected a JSON object")
    return data


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ChatTemplateError(f"cannot read {path}: {exc}") from exc


def load_chat_template(
    model_dir: str | Path | None = None,
    *,
    chat_template: str | None = None,
    chat_template_file: str | Path | None = None,
    bos_token: str | None = None,
    eos_token: str | None = None,
    jinja: bool = True,
) -> ChatTemplate:
    """The template a model serves with: ``--chat-template`` text or name, else ``--chat-template-file``, else the
    checkpoint's (``chat_template.jinja`` with ``additional_chat_templates/tool_use.jinja``, ``chat_template.json``,
    then tokenizer_config.json), else chatml; under ``--no-jinja`` (``jinja=False``) the built-in format it stands for.

    This is the one resolution of the template options: serving calls it with the loaded checkpoint's directory, and
    ``mlxd config check`` with the directory or None (it reads template files and tokenizer_config.json, never
    weights), so that a value serving would refuse is refused before the daemon says it is listening.
    ``bos_token``/``eos_token`` override what tokenizer_config.json says (the loaded tokenizer knows best).
    """
    if chat_template and chat_template_file:
        raise ChatTemplateError("--chat-template and --chat-template-file are both set; give one")
    config: dict[str, Any] = {}
    directory = Path(model_dir) if model_dir is not None else None
    if directory is not None and (directory / "tokenizer_config.json").is_file():
        config = _read_json(directory / "tokenizer_config.json")
    bos = bos_token if bos_token is not None else _token_text(config.get("bos_token"))
    eos = eos_token if eos_token is not None else _token_text(config.get("eos_token"))

    if chat_template:
        return _probed(ChatTemplate(chat_template, bos_token=bos, eos_token=eos, origin="--chat-template",
                                    jinja=jinja))
    if chat_template_file:
        path = Path(chat_template_file)
        text = _read_text(path)
        return _probed(ChatTemplate(text, bos_token=bos, eos_token=eos, origin=f"--chat-template-file {path}",
                                    jinja=jinja))

    default: str | None = None
    tool_use: str | None = None
    origin = "chatml (no template in the checkpoint)"
    if directory is not None:
        if (directory / "chat_template.jinja").is_file():
            origin = str(directory / "chat_template.jinja")
            default = _read_text(directory / "chat_template.jinja")
            # transformers saves named variants beside it, one file per name.
            if (directory / "additional_chat_templates" / "tool_use.jinja").is_file():
                tool_use = _read_text(directory / "additional_chat_templates" / "tool_use.jinja")
        elif (directory / "chat_template.json").is_file():
            origin = str(directory / "chat_template.json")
            default, tool_use = _named_templates(_read_json(Path(origin)).get("chat_template"), origin)
        elif config.get("chat_template") is not None:
            origin = str(directory / "tokenizer_config.json")
            default, tool_use = _named_templates(config.get("chat_template"), origin)
    if not default:
        # As upstream: no default template means the tool_use one, or else chatml.
        default = tool_use or "chatml"
    return _probed(ChatTemplate(default, bos_token=bos, eos_token=eos, tool_use_source=tool_use, origin=origin,
                                jinja=jinja))


def _probed(template: ChatTemplate) -> ChatTemplate:
    # Probing renders the template a dozen times: do it while loading, not on the first request's event loop.
    _ = template.caps, template.supports_thinking
    return template

