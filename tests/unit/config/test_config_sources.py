"""Each source on its own: the INI grammar, TOML typing, env parsing, the argv parser's edge cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.config import ConfigError, table
from mlxd.config.sources.argv import ArgvSource
from mlxd.config.sources.env import EnvSource
from mlxd.config.sources.ini import parse_ini
from mlxd.config.sources.presets import normalise_section
from mlxd.config.sources.toml import TomlSource


def test_ini_grammar() -> None:
    # docs/precedence.md 2.2: headers, key = value, ';' and '#' comments, trailing comments, keys before a header
    doc, problems = parse_ini("a = 1 ; note\n# c\n; c\n[s]\n b.c-d_e = x y  # tail\nurl = http://h/#frag\n", "f")
    assert problems == []
    assert [(e.key, e.value, e.line) for e in doc.sections["default"]] == [("a", "1", 1)]
    assert [(e.key, e.value) for e in doc.sections["s"]] == [("b.c-d_e", "x y"), ("url", "http://h/#frag")]


@pytest.mark.parametrize("text,where,message", [("[a\n", "f:1:1", "malformed section header"),
                                                ("  = 1\n", "f:1:3", "expected 'key = value'"),
                                                ("9key = 1\n", "f:1:1", "expected 'key = value'"),
                                                ("[a]\nnoequals\n", "f:2:1", "expected 'key = value'")])
def test_ini_errors_name_line_and_column(text: str, where: str, message: str) -> None:
    _, problems = parse_ini(text, "f")
    assert [(p.source, p.message) for p in problems] == [(where, message)]


@pytest.mark.parametrize("raw,expected", [("org/repo:q4_k_m", "org/repo:Q4_K_M"), ("r:model-q8_0", "r:Q8_0"),
                                          ("r:v1.bf16", "r:BF16"), ("plain", "plain")])
def test_section_names(raw: str, expected: str) -> None:
    # docs/precedence.md 2.5
    assert normalise_section(raw) == expected


def _toml(text: str):  # type: ignore[no-untyped-def]
    return TomlSource(text.encode(), "/c.toml", table()).read()


def test_toml_types() -> None:
    layer = _toml('lora = "a.safetensors,b.safetensors"\nalias = ["x", "y"]\ntemp = 1\nctx-size = "64"\n'
                  'kv-unified = false\n')
    values = {n: s.value for n, s in layer.settings.items()}
    assert values == {"lora": ["a.safetensors", "b.safetensors"], "alias": ["x", "y"], "temperature": 1.0,
                      "ctx-size": 64, "kv-unified": False}
    assert layer.problems == []


@pytest.mark.parametrize("text,message", [("port = true\n", "expected an integer, not a boolean"),
                                          ("metrics = 1\n", "expected true or false"),
                                          ("alias = [1, 2]\n", "expected an array of strings"),
                                          ("port = 70000\n", "must be <= 65535"),
                                          ("flash-attn = \"maybe\"\n", "expected one of on, off, auto"),
                                          ("[port]\nx = 1\n", "expected a value, not a table"),
                                          ("config = \"other.toml\"\n", "cannot name another TOML file")])
def test_toml_bad_values(text: str, message: str) -> None:
    [problem] = _toml(text).problems
    assert message in problem.message
    assert problem.source.startswith("toml:/c.toml:")


def test_toml_malformed_names_line_and_column() -> None:
    [problem] = _toml("a = 1\nb = [1,\n").problems
    assert problem.source.startswith("toml:/c.toml:") and problem.source.count(":") == 3
    assert problem.message.startswith("malformed TOML")


def test_env_values_are_typed_and_bad_ones_reported() -> None:
    layer = EnvSource({"LLAMA_ARG_PORT": "80a", "LLAMA_ARG_TOP_K": "5", "LLAMA_ARG_FLASH_ATTN": "on",
                       "UNRELATED": "x"}, table()).read()
    assert {n: s.value for n, s in layer.settings.items()} == {"top-k": 5, "flash-attn": "on"}
    assert [(p.option, p.source) for p in layer.problems] == [("port", "env:LLAMA_ARG_PORT")]


def test_api_key_is_redacted_in_diagnostics() -> None:
    layer = EnvSource({"HF_TOKEN": "x"}, table()).read()
    assert layer.settings["hf-token"].value == "x"
    bad = TomlSource(b"api-key = 5\n", "/c.toml", table()).read()
    assert bad.problems[0].value == "<redacted>"


def test_argv_missing_value_and_stray_words() -> None:
    layer = ArgvSource(["stray", "-c"], table()).read()
    assert [p.render() for p in layer.problems] == ["cli: invalid argument: stray",
                                                    "cli:-c: ctx-size: expected a value"]


def test_two_value_option() -> None:
    layer = ArgvSource(["--control-vector-layer-range", "3", "9"], table()).read()
    assert layer.settings["control-vector-layer-range"].value == ["3", "9"]


def test_missing_config_file_is_reported(resolve_in, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file") as info:
        resolve_in([], {"MLXD_CONFIG": str(tmp_path / "nope.toml")})
    assert info.value.problems[0].source == "env:MLXD_CONFIG"
