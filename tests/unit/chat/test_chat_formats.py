"""Each family's tool-call format read from model output: detected from the real template, whole and streamed
(every cut of the text into deltas gives the same; a call announced with its name, then its arguments piece by
piece), malformed or unclosed calls kept as content."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlxd.engine.chat import (
    ChatOutputStream,
    ChatTemplate,
    ToolCallDelta,
    apply_chat_template,
    parse_chat_output,
    tool_call_format,
)
from mlxd.engine.chat.formats import FORMATS
from tests.unit.chat.streamed_calls import assemble, holds_in_order

CORPUS = Path(__file__).parents[2] / "fixtures" / "templates"
TOOLS = ({"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},)
ARGS = {"city": "Paris", "days": 3}
J = json.dumps(ARGS)
# format -> (a corpus template of the family, an answer with text before one call to get_weather(ARGS))
SAMPLES: dict[str, tuple[str, str]] = {
    "hermes": ("Qwen-Qwen2.5-7B-Instruct", f'Sure.\n<tool_call>\n{{"name": "get_weather", "arguments": {J}}}\n'
                                            "</tool_call>"),
    "qwen3-coder": ("Qwen3-Coder", "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                                   "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"),
    "mistral": ("unsloth-mistral-Devstral-Small-2507", f"Sure.[TOOL_CALLS]get_weather[ARGS]{J}"),
    "mistral-v3": ("mistralai-Mistral-Nemo-Instruct-2407",
                   f'Sure.[TOOL_CALLS][{{"name": "get_weather", "arguments": {J}}}]'),
    "deepseek-r1": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
                    "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                    f"{J}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    "deepseek-v3.1": ("deepseek-ai-DeepSeek-V3.1", "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather"
                                                   f"<｜tool▁sep｜>{J}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    "deepseek-v3.2": ("deepseek-ai-DeepSeek-V3.2",
                      'Sure.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
                      '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
                      '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
                      "</｜DSML｜invoke>\n</｜DSML｜function_calls>"),
    "glm": ("GLM-4.6", "Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
                       "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"),
    "kimi-k2": ("Kimi-K2-Instruct", "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                                    f"<|tool_call_argument_begin|>{J}<|tool_call_end|><|tool_calls_section_end|>"),
    "minimax-m2": ("MiniMax-M2", 'Sure.\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">'
                                 'Paris</parameter>\n<parameter name="days">3</parameter>\n</invoke>\n'
                                 "</minimax:tool_call>"),
    "seed-oss": ("ByteDance-Seed-OSS", "Sure.\n<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris"
                                       "</parameter>\n<parameter=days>3</parameter>\n</function>\n</seed:tool_call>"),
    "command-r7b": ("CohereForAI-c4ai-command-r7b-12-2024-tool_use",
                    f'Sure.<|START_ACTION|>[{{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {J}}}]'
                    "<|END_ACTION|>"),
    "granite": ("ibm-granite-granite-3.3-2B-Instruct",
                f'Sure.<|tool_call|>[{{"name": "get_weather", "arguments": {J}}}]'),
    "nemotron-v2": ("NVIDIA-Nemotron-Nano-v2",
                    f'Sure.<TOOLCALL>[{{"name": "get_weather", "arguments": {J}}}]</TOOLCALL>'),
    "apertus": ("Apertus-8B-Instruct", f'Sure.<|tools_prefix|>[{{"get_weather": {J}}}]<|tools_suffix|>'),
    "lfm2": ("LFM2.5-8B-A1B", 'Sure.<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>'),
    "gemma4": ("google-gemma-4-31B-it", 'Sure.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}'
                                        "<tool_call|>"),
    "functionary-v3.1": ("meetkai-functionary-medium-v3.1", f"Sure.<function=get_weather>{J}</function>"),
    "functionary-v3.2": ("meetkai-functionary-medium-v3.2", f"Sure.>>>get_weather\n{J}"),
    "minimax-m1": ("MiniMax-M1", f'Sure.\n<tool_calls>\n{{"name": "get_weather", "arguments": {J}}}\n</tool_calls>'),
    "apriel": ("unsloth-Apriel-1.5", f'Sure.\n<tool_calls>[{{"name": "get_weather", "arguments": {J}}}]</tool_calls>'),
    "solar-open": ("upstage-Solar-Open-100B", "Sure.<|tool_calls|><|tool_call:begin|>a1b2c3<|tool_call:name|>get_weather"
                                              f"<|tool_call:args|>{J}<|tool_call:end|><|calls|>"),
    "hy3": ("tencent-Hy3", "Sure.<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n"
                           "<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Paris"
                           "</arg_value:opensource>\n<arg_key:opensource>days</arg_key:opensource>\n"
                           "<arg_value:opensource>3</arg_value:opensource>\n</tool_call:opensource>\n"
                           "</tool_calls:opensource>"),
    "minicpm5": ("openbmb-MiniCPM5-1B", 'Sure.\n<function name="get_weather"><param name="city"><![CDATA[Paris]]>'
                                        '</param><param name="days">3</param></function>'),
    "kimi-k3": ("Kimi-K3", "<|open|>response<|sep|>Sure.<|close|>response<|sep|><|open|>tools<|sep|><|open|>call "
                           'tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris'
                           '<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>3<|close|>argument'
                           "<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"),
    "minimax-m3": ("MiniMax-M3", "Sure.]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"get_weather\">"
                                 "]<]minimax[>[<city>Paris]<]minimax[>[</city>]<]minimax[>[<days>3]<]minimax[>[</days>"
                                 "]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>"),
    "gpt-oss": ("openai-gpt-oss-120b", "<|channel|>commentary<|message|>Sure.<|end|><|start|>assistant<|channel|>"
                                       f"commentary to=functions.get_weather <|constrain|>json<|message|>{J}<|call|>"),
}


def ids() -> Callable[[], str]:
    numbers = itertools.count()
    return lambda: f"call{next(numbers)}"


def whole(fmt: str, text: str) -> tuple[str, list[tuple[str, dict]]]:
    message = parse_chat_output(text, parse_tool_calls=True, tool_call_format=fmt, tools=TOOLS, id_factory=ids())
    return message.content, [(c.name, json.loads(c.arguments_json)) for c in message.tool_calls]


def stream_deltas(fmt: str, text: str, size: int) -> tuple[ChatOutputStream, list[ToolCallDelta]]:
    stream = ChatOutputStream(parse_tool_calls=True, tool_call_format=fmt, tools=TOOLS, id_factory=ids())
    deltas = [c for i in range(0, len(text), size) for d in stream.feed(text[i:i + size]) for c in d.tool_calls]
    deltas += [c for d in stream.finish() for c in d.tool_calls]
    return stream, deltas


def streamed(fmt: str, text: str, size: int) -> tuple[str, list[tuple[str, dict]]]:
    stream, deltas = stream_deltas(fmt, text, size)
    message = stream.message()
    assert assemble(deltas) == [(c.id, c.name, c.arguments_json) for c in message.tool_calls]
    return message.content, [(c.name, json.loads(c.arguments_json)) for c in message.tool_calls]


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_detected_from_the_familys_template(fmt: str) -> None:
    template, _ = SAMPLES[fmt]
    assert tool_call_format((CORPUS / f"{template}.jinja").read_text(encoding="utf-8")) == fmt


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_call_read_whole_and_streamed(fmt: str) -> None:
    text = SAMPLES[fmt][1]
    expected = ("Sure.", [("get_weather", ARGS)])
    assert whole(fmt, text) == expected
    for size in (1, 2, 7, len(text)):
        assert streamed(fmt, text, size) == expected, size


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_arguments_stream_as_written(fmt: str) -> None:
    """As llama-server: the first delta has the id and name with ``{``, then the arguments grow piece by piece,
    each piece extending the last, and together they are the whole parse's arguments."""
    text = SAMPLES[fmt][1]
    _, deltas = stream_deltas(fmt, text, 1)
    first, *pieces = deltas
    # Kimi K2 writes its calls' ids, which llama-server keeps.
    call_id = "functions.get_weather:0" if fmt == "kimi-k2" else "call0"
    assert (first.index, first.id, first.name, first.arguments) == (0, call_id, "get_weather", "{")
    assert len(pieces) > 4 and all((p.index, p.id, p.name) == (0, "", "") and p.arguments for p in pieces)
    (call,) = parse_chat_output(text, parse_tool_calls=True, tool_call_format=fmt, tools=TOOLS,
                                id_factory=ids()).tool_calls
    assert "".join(d.arguments for d in deltas) == call.arguments_json and call.id == call_id


def streamed_view(fmt: str, text: str, size: int) -> tuple[str, bool]:
    """The streamed content, and whether the whole parse's calls are among the streamed ones (a stream also keeps
    a call it announced before its region turned out not to be calls)."""
    stream, deltas = stream_deltas(fmt, text, size)
    found = parse_chat_output(text, parse_tool_calls=True, tool_call_format=fmt, tools=TOOLS).tool_calls
    calls = [(n, a) for _, n, a in assemble(deltas)]
    return stream.message().content, holds_in_order([(c.name, c.arguments_json) for c in found], calls)


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_malformed_or_cut_calls_stay_content(fmt: str) -> None:
    text = SAMPLES[fmt][1]
    for broken in (text.replace("Paris", 'Pa"ris}{'), text.replace("get_weather", "", 1).replace("3", "[")):
        content, calls = whole(fmt, broken)
        if not calls:
            if fmt == "gpt-oss":  # channels are read, not kept: the bad call's body is what stays content
                assert broken.split("<|message|>")[-1].removesuffix("<|call|>") in content
            else:
                source = broken
                for marker in FORMATS[fmt].content_markup:  # markup around the answer is never content
                    source = source.replace(marker, "")
                assert content.replace("\n", "") in source.replace("\n", "") and content
            assert streamed_view(fmt, broken, 3) == (content, True)
    cut = text[: len(text) - 3]
    content, calls = whole(fmt, cut)
    assert streamed_view(fmt, cut, 5) == (content, True)
    assert calls == [] or fmt in ("mistral", "mistral-v3", "granite", "functionary-v3.2")



NOISE = st.sampled_from(['"', "\\", "{", "}", "[", "]", ":", ",", "<", ">", "=", "(", ")", " ", "\n", "x", "3", "é",
                         "\\q", '"na\\q"', "get_weather", "</parameter>", "<parameter=city>", "null", "true"])


@settings(max_examples=80, derandomize=True, deadline=None)
@given(data=st.data())
def test_any_text_in_any_format_streams_without_error(data: st.DataObject) -> None:
    """Bad input never breaks a stream: whatever the model writes around and inside a call region, every format's
    stream gives the whole parse's content, and the whole parse's calls among those it streamed."""
    fmt = data.draw(st.sampled_from(sorted(SAMPLES)))
    sample = SAMPLES[fmt][1]
    cuts = data.draw(st.lists(st.integers(0, len(sample)), min_size=1, max_size=3))
    pieces = [sample[:c] for c in cuts] + data.draw(st.lists(NOISE, max_size=8))
    text = "".join(data.draw(st.permutations(pieces)))
    content, _ = whole(fmt, text)
    assert streamed_view(fmt, text, data.draw(st.integers(1, 9))) == (content, True)


def test_kimi_k3_answer_sections() -> None:
    """Kimi K3's answer as b10622 reads it: the think section is the reasoning (its generation prompt opens it),
    the response section the content (its markup dropped), the tools section the calls."""
    template = ChatTemplate((CORPUS / "Kimi-K3.jinja").read_text(encoding="utf-8"))
    prompt = apply_chat_template(template, [{"role": "user", "content": "Weather?"}], tools=list(TOOLS))
    assert prompt.starts_in_reasoning and prompt.tool_call_format == "kimi-k3"
    text = "hmm<|close|>think<|sep|>" + SAMPLES["kimi-k3"][1] + "<|close|>message<|sep|>"
    for size in (1, 4, len(text)):
        stream = ChatOutputStream.for_prompt(prompt, id_factory=ids())
        for i in range(0, len(text), size):
            stream.feed(text[i:i + size])
        stream.finish()
        message = stream.message()
        assert (message.reasoning_content, message.content) == ("hmm", "Sure.")
        assert [(c.name, json.loads(c.arguments_json)) for c in message.tool_calls] == [("get_weather", ARGS)]


@pytest.mark.parametrize("fmt", ["hermes", "qwen3-coder", "mistral", "gemma4"])
def test_a_long_argument_streams_in_pieces_that_add_up(fmt: str) -> None:
    """A file's text as an argument: a long region is read again only as it grows by a fraction of itself (the
    event loop's cost stays near linear), and its pieces still add up to the whole call's arguments."""
    text = SAMPLES[fmt][1].replace("Paris", "Paris " + "line of code\\n" * 400 if fmt == "hermes" else
                                   "Paris " + "line of code " * 400)
    _, deltas = stream_deltas(fmt, text, 3)
    (call,) = parse_chat_output(text, parse_tool_calls=True, tool_call_format=fmt, tools=TOOLS).tool_calls
    assert "".join(d.arguments for d in deltas) == call.arguments_json
    assert 20 < len(deltas) < len(text) // 3  # in pieces, fewer than one per delta once the region is long
