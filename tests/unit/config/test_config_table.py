"""The option table: names, spellings, env names, the typed Config fields other packages read, and the generated
Config module kept in step with the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.config import Config, Kind, codegen, table
from mlxd.config.options import inventory
from mlxd.config.prepass import rewrite


def test_every_b10621_option_and_spelling_is_in_the_table() -> None:
    b10621 = [s for s in table() if s.origin == "b10621"]
    assert len(b10621) == len(inventory()) == 249
    spellings = [sp for s in b10621 for sp in s.spellings]
    assert len(spellings) == len(set(spellings)) == 407
    assert sum(sp.startswith("--") for sp in spellings) == 323


def test_env_names() -> None:
    envs = {e for s in table() if s.origin == "b10621" for e in s.env}
    assert len(envs) == 136 and {"LLAMA_API_KEY", "HF_TOKEN", "MTMD_BACKEND_DEVICE"} <= envs
    negatives = [s.env_negative for s in table() if s.origin == "b10621" and s.env_negative]
    assert len(negatives) == 25
    assert table().get("config").env == ("MLXD_CONFIG",)


@pytest.mark.parametrize("spelling,name", [("-n", "n-predict"), ("--temp", "temperature"), ("-ngl", "n-gpu-layers"),
                                           ("-c", "ctx-size"), ("-np", "parallel"), ("-b", "batch-size"),
                                           ("-nocb", "cont-batching"), ("-lv", "log-verbosity"), ("-hfr", "hf-repo"),
                                           ("--typical", "typical-p"), ("--top-nsigma", "top-n-sigma"),
                                           ("-ctk", "cache-type-k"), ("-fa", "flash-attn"), ("-hf", "hf-repo")])
def test_canonical_names_are_the_last_long_positive_spelling(spelling: str, name: str) -> None:
    assert table().by_spelling[spelling].name == name


EXPECTED = {  # field: (type annotation, default) that the engine and the API read
    "model": ("str | None", None), "hf_repo": ("str | None", None), "ctx_size": ("int", 0),
    "n_predict": ("int", -1), "batch_size": ("int", 2048), "ubatch_size": ("int", 512), "parallel": ("int", -1),
    "cont_batching": ("bool", True), "cache_prompt": ("bool", True), "cache_ram": ("int", 8192),
    "temperature": ("float", 0.8), "top_k": ("int", 40), "top_p": ("float", 0.95), "min_p": ("float", 0.05),
    "typical_p": ("float", 1.0), "top_n_sigma": ("float", -1.0), "dry_penalty_last_n": ("int", 64),
    "dry_sequence_breaker": ("list[str]", ["\n", ":", '"', "*"]), "seed": ("int", -1),
    "api_key": ("list[str]", []), "api_key_file": ("str | None", None), "host": ("str", "127.0.0.1"),
    "port": ("int", 8080), "reasoning_format": ("str", "deepseek"), "reasoning": ("str", "auto"),
    "slots": ("bool", True), "models_max": ("int", 4), "log_verbosity": ("int", 3), "log_colors": ("str", "auto"),
    "hf_token": ("str | None", None), "n_gpu_layers": ("str", "auto"), "flash_attn": ("str", "auto"),
    "threads": ("int", -1), "cpu_blas": ("str", "auto"), "watch_config": ("bool", False),
}


@pytest.mark.parametrize("field", sorted(EXPECTED))
def test_config_field_types_and_defaults(field: str) -> None:
    info = Config.model_fields[field]
    annotation, default = EXPECTED[field]
    assert str(info.annotation).replace("typing.", "").replace("<class '", "").replace("'>", "") == annotation
    assert getattr(Config(), field) == default


def test_config_is_frozen_and_closed() -> None:
    cfg = Config()
    with pytest.raises(ValueError):
        cfg.ctx_size = 1  # type: ignore[misc]
    with pytest.raises(ValueError):
        Config(no_such_option=1)  # type: ignore[call-arg]


def test_secrets_and_restart_options() -> None:
    assert {s.name for s in table() if s.secret} == {"api-key", "hf-token"}
    assert not table().get("port").live and table().get("temperature").live


def test_generated_config_module_is_current() -> None:
    assert (Path(codegen.__file__).with_name("model.py")).read_text(encoding="utf-8") == codegen.render()


def test_mlxd_own_options() -> None:
    names = {s.name for s in table() if s.origin == "mlxd"}
    assert names == {"config", "admin-listen", "admin-token-file", "watch-config", "model-store-root", "cpu-blas",
                     "cpu-gemv", "cpu-jit", "worker-affinity", "shutdown-timeout", "timeout-header", "timeout-idle",
                     "connections-max", "state-dir", "webui-store", "cache-disk", "cache-disk-max",
                     "models-wait-timeout", "rpc-backend", "rpc-token-file"}
    assert table().get("watch-config").kind is Kind.BOOL_PAIR
    assert table().get("webui-store").kind is Kind.BOOL_PAIR


@pytest.mark.parametrize("argv,expected", [
    (["-ngl", "99", "-fa", "on"], ["--n-gpu-layers", "99", "--flash-attn", "on"]),
    (["-a", "-ngl", "-ngl", "1"], ["-a", "-ngl", "--n-gpu-layers", "1"]),  # a value that spells an option
    (["-nkvo", "-no-kvu"], ["--no-kv-offload", "--no-kv-unified"]),
    (["--ctx_size", "1", "-c", "2"], ["--ctx-size", "1", "-c", "2"]),  # '_' rewritten for '--' args only
    (["--", "-ngl", "--ctx_size"], ["--", "-ngl", "--ctx_size"]),  # nothing after '--'
    (["--control-vector-layer-range", "-ngl", "-fa", "-ngl", "1"],
     ["--control-vector-layer-range", "-ngl", "-fa", "--n-gpu-layers", "1"]),  # two values
])
def test_prepass(argv: list[str], expected: list[str]) -> None:
    assert rewrite(argv, table()) == expected


def test_configuration_page_is_current() -> None:
    from mlxd.config import docs

    page = Path(docs.__file__).resolve().parents[2] / "docs" / "configuration.md"
    assert page.read_text(encoding="utf-8") == docs.render(), "run: python -m mlxd.config.docs"


def test_a_default_that_follows_another_option_is_documented_as_such(resolve_in, tmp_path: Path) -> None:
    """watch-config is on with --config and off without: the page says both, as the resolver does."""
    from mlxd.config import docs

    [row] = [line for line in docs.render().splitlines() if line.startswith("| `watch-config` |")]
    assert "| true with `--config`, else false |" in row
    toml = tmp_path / "m.toml"
    toml.write_text("ctx-size = 64\n")
    assert resolve_in(["--config", str(toml)]).config.watch_config is True
    assert resolve_in([]).config.watch_config is False
