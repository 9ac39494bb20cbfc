"""`mlxd config dump` output loads back to the same Config (a property test), and from-args output too."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlxd.config import Config, OptionSpec, ValueType, apply_overrides, resolve, table
from mlxd.config.render import dump_toml, from_args_toml
from mlxd.errors import ConfigError

# Options whose value changes the mode or names a file that is read are left to their own tests.
_SKIP = {"config", "model", "hf-repo", "docker-repo", "models-dir", "models-preset", "rope-scale", "rope-freq-scale"}
SPECS = [s for s in table() if s.treatment in ("deferred", "supported") and not s.check and s.name not in _SKIP]
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)


def _value(spec: OptionSpec) -> st.SearchStrategy[Any]:
    lo = int(spec.minimum) if spec.minimum is not None else -(2**31)
    hi = int(spec.maximum) if spec.maximum is not None else 2**31
    base: st.SearchStrategy[Any]
    if spec.choices:
        base = st.sampled_from(spec.choices)
    elif spec.domain == "json_object":
        base = st.dictionaries(TEXT, st.booleans() | st.integers(-9, 9) | TEXT, max_size=2).map(json.dumps)
    elif spec.domain == "logit_bias":
        base = st.lists(st.builds(lambda t, b: f"{t}{b:+g}", st.integers(0, 99999), st.integers(-9, 9)), max_size=3)
    elif spec.value_type is ValueType.SCALED:
        path = TEXT.filter(lambda t: "," not in t and t.strip() == t and t)
        base = st.lists(st.tuples(path, st.integers(-9, 9).map(float)), max_size=3)
    elif spec.value_type is ValueType.INT:
        base = st.integers(lo, hi)
    elif spec.value_type is ValueType.FLOAT:
        base = st.floats(float(lo), float(hi), allow_nan=False, allow_infinity=False)
    elif spec.value_type is ValueType.BOOL:
        base = st.booleans()
    elif spec.value_type is ValueType.LIST:
        base = st.lists(TEXT.filter(lambda t: "," not in t and t.strip() == t and t) if spec.split else TEXT,
                        max_size=3)
    elif spec.value_type is ValueType.PAIR:
        base = st.lists(TEXT, min_size=2, max_size=2)
    else:
        base = TEXT
    return st.one_of(st.none(), base) if spec.optional else base


BY_NAME = {s.name: s for s in SPECS}
DOCS = st.lists(st.sampled_from(sorted(BY_NAME)), max_size=8, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({n: _value(BY_NAME[n]) for n in names}))


def _same(a: Config, b: Config) -> bool:
    """Equal apart from what reading a dump from a file changes: ``config`` (the file's path) and the default of
    ``watch-config``, which is on with a file (docs/precedence.md rule 3.2; the tests below check it)."""
    ignored = {"config": None, "watch_config": None}
    return a.model_copy(update=ignored) == b.model_copy(update=ignored)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCS)
def test_dump_loads_back_to_the_same_config(doc: dict[str, Any]) -> None:
    base = resolve([], {}, read_config_ini=False)
    resolved = apply_overrides(base, {k: v for k, v in doc.items() if v is not None})
    text = dump_toml(resolved, secrets=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dump.toml"
        path.write_text(text, encoding="utf-8")
        if not text.strip():
            # Nothing differs from the defaults, so the dump is empty, and an empty file is refused like a
            # truncated one: it never loads as "all defaults".
            with pytest.raises(ConfigError, match="the file sets no option"):
                resolve(["--config", str(path)], {}, read_config_ini=False)
            return
        again = resolve(["--config", str(path)], {}, read_config_ini=False)
    assert _same(again.config, resolved.config)
    # a watch-config a source set is written and read back; its default is the file's: on
    assert again.config.watch_config is (resolved.config.watch_config if resolved.explicit("watch-config") else True)


def test_dump_all_loads_back(tmp_path: Path) -> None:
    resolved = resolve(["-c", "512", "--no-cache-prompt", "--api-key", "k"], {}, read_config_ini=False)
    path = tmp_path / "all.toml"
    path.write_text(dump_toml(resolved, all_values=True, secrets=True), encoding="utf-8")
    assert _same(resolve(["--config", str(path)], {}, read_config_ini=False).config, resolved.config)


def test_dump_redacts_secrets_by_default() -> None:
    resolved = resolve(["--api-key", "hunter2", "-hft", "hf_x"], {}, read_config_ini=False)
    text = dump_toml(resolved)
    assert "hunter2" not in text and "hf_x" not in text and "<redacted>" in text


def test_from_args_loads_back(tmp_path: Path) -> None:
    args = ["-m", "/models/q", "-c", "4096", "-ngl", "all", "-a", "x,y", "--temp", "0.2", "-nocb"]
    path = tmp_path / "from-args.toml"
    path.write_text(from_args_toml(resolve(args, {}, read_config_ini=False)), encoding="utf-8")
    assert _same(resolve(["--config", str(path)], {}, read_config_ini=False).config,
                 resolve(args, {}, read_config_ini=False).config)


def test_dump_router_models_load_back(tmp_path: Path) -> None:
    ini = tmp_path / "p.ini"
    ini.write_text("[*]\nc = 64\n[a]\nmodel = /a\ntemp = 0.1\n[b]\nmodel = /b\n", encoding="utf-8")
    resolved = resolve(["--models-preset", str(ini)], {}, read_config_ini=False)
    text = dump_toml(resolved).replace(f'models-preset = "{ini}"\n', "")
    path = tmp_path / "router.toml"
    path.write_text(text, encoding="utf-8")
    again = resolve(["--config", str(path)], {}, read_config_ini=False)
    assert again.models.keys() == resolved.models.keys()
    for name, model in resolved.models.items():
        assert _same(again.models[name].config.model_copy(update={"models_preset": None}),
                     model.config.model_copy(update={"models_preset": None}))
