"""The precedence matrix: b10621's rules (docs/precedence.md) and design.md's layering, one test per
rule, each citing its rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.config import ConfigError, apply_overrides
from mlxd.config.render import explain_data
from tests.unit.config.conftest import write


def _opt(resolved, name):  # type: ignore[no-untyped-def]
    entry = explain_data(resolved)["options"][name]
    return entry["value"], entry["source"]


# --- value options ------------------------------------------------------------------------------------------------

def test_value_option_default(resolve_in):
    assert _opt(resolve_in([]), "ctx-size") == (0, "default")


def test_value_option_each_layer_beats_the_one_below(resolve_in, tmp_path: Path):
    # rule 1.1 (config.ini < env < CLI) and design.md "Precedence" (TOML between config.ini and env)
    write(tmp_path / "etc-llama.cpp/config.ini", "[*]\nctx-size = 100\n")
    toml = write(tmp_path / "mlxd.toml", "# comment\nctx-size = 200\n")
    assert _opt(resolve_in([]), "ctx-size") == (100, f"ini:{tmp_path}/etc-llama.cpp/config.ini:2")
    assert _opt(resolve_in(["--config", toml]), "ctx-size") == (200, f"toml:{toml}:2")
    env = {"LLAMA_ARG_CTX_SIZE": "300"}
    assert _opt(resolve_in(["--config", toml], env), "ctx-size") == (300, "env:LLAMA_ARG_CTX_SIZE")
    assert _opt(resolve_in(["--config", toml, "-c", "400"], env), "ctx-size") == (400, "cli:-c")


def test_toml_path_from_env(resolve_in, tmp_path: Path):
    # design.md: the TOML file comes from --config or MLXD_CONFIG
    toml = write(tmp_path / "a.toml", "temp = 0.25\n")
    assert _opt(resolve_in([], {"MLXD_CONFIG": toml}), "temperature") == (0.25, f"toml:{toml}:1")


def test_config_ini_user_file_beats_system_file_and_default_beats_star(resolve_in, tmp_path: Path):
    # rule 1.2: /etc first, then $XDG_CONFIG_HOME/llama.cpp/config.ini; only [*] and [default] apply
    write(tmp_path / "etc-llama.cpp/config.ini", "[*]\nport = 1000\ntop-k = 5\n")
    user = write(tmp_path / "xdg/llama.cpp/config.ini",
                 "port = 2000\n[*]\nport = 3000\n[other]\ntop-k = 9\n")
    resolved = resolve_in([])
    assert _opt(resolved, "port") == (2000, f"ini:{user}:1")  # keys before a header are [default]
    assert _opt(resolved, "top-k") == (5, f"ini:{tmp_path}/etc-llama.cpp/config.ini:3")  # [other] ignored


def test_config_ini_unknown_key_is_a_warning(resolve_in, tmp_path: Path):
    # rule 1.2: unknown keys produce a warning and are skipped
    write(tmp_path / "xdg/llama.cpp/config.ini", "[*]\nnot-an-option = 1\n")
    assert any("not-an-option" in w for w in resolve_in([]).warnings)


def test_cli_underscore_spelling_is_rewritten_for_double_dash_only(resolve_in):
    # rule 1.8: every '_' of a '--' argument becomes '-'; single-dash forms are not rewritten
    assert _opt(resolve_in(["--ctx_size", "64"]), "ctx-size") == (64, "cli:--ctx_size")
    with pytest.raises(ConfigError, match="invalid argument: -n_gl"):
        resolve_in(["-n_gl", "99"])


def test_repeated_argument_keeps_last_value(resolve_in):
    # rule 1.9: assigning handlers keep the last value
    resolved = resolve_in(["-c", "1", "--ctx-size", "2"])
    assert _opt(resolved, "ctx-size") == (2, "cli:--ctx-size")
    assert any("multiple times" in w for w in resolved.warnings)


def test_value_after_option_is_never_an_option(resolve_in):
    # rule 1.8 / the pre-pass: a value that spells an option stays a value
    assert _opt(resolve_in(["-a", "-ngl"]), "alias") == (["-ngl"], "cli:-a")
    assert _opt(resolve_in(["-n", "-1"]), "n-predict") == (-1, "cli:-n")


# --- value-less flags ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("word", ["on", "enabled", "true", "1"])
def test_flag_fires_from_env_for_truthy_words(resolve_in, word):
    # rules 1.5 and 1.6: a plain flag is applied only for on/enabled/true/1
    resolved = resolve_in([], {"LLAMA_ARG_ENDPOINT_METRICS": word})
    assert _opt(resolved, "metrics") == (True, "env:LLAMA_ARG_ENDPOINT_METRICS")


@pytest.mark.parametrize("word", ["off", "disabled", "false", "0"])
def test_flag_does_nothing_for_falsey_words(resolve_in, word):
    # rule 1.5: a falsey value does nothing
    assert _opt(resolve_in([], {"LLAMA_ARG_ENDPOINT_METRICS": word}), "metrics") == (False, "default")


def test_flag_words_are_case_sensitive(resolve_in):
    # rule 1.6: matching is exact and case-sensitive (mlxd reports the unknown word instead of ignoring it)
    with pytest.raises(ConfigError, match="LLAMA_ARG_ENDPOINT_METRICS"):
        resolve_in([], {"LLAMA_ARG_ENDPOINT_METRICS": "TRUE"})


def test_flag_on_cli_beats_falsey_env(resolve_in):
    # rule 1.4: CLI beats env
    assert _opt(resolve_in(["--metrics"], {"LLAMA_ARG_ENDPOINT_METRICS": "0"}), "metrics") == (True, "cli:--metrics")


# --- boolean pairs ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("word,expected", [("on", True), ("1", True), ("disabled", False), ("false", False)])
def test_bool_pair_env_reads_parse_bool_value(resolve_in, word, expected):
    # rule 1.5: boolean pairs read parse_bool_value
    assert _opt(resolve_in([], {"LLAMA_ARG_CONT_BATCHING": word}), "cont-batching") == (
        expected, "env:LLAMA_ARG_CONT_BATCHING")


def test_bool_pair_env_rejects_other_words(resolve_in):
    # rule 1.5: anything else fails with "invalid boolean value"
    with pytest.raises(ConfigError, match="invalid boolean value") as info:
        resolve_in([], {"LLAMA_ARG_CONT_BATCHING": "yes"})
    assert info.value.problems[0].source == "env:LLAMA_ARG_CONT_BATCHING"


@pytest.mark.parametrize("value", ["0", "", "false", "1"])
def test_no_alias_disables_when_it_merely_exists_and_wins(resolve_in, value):
    # rule 1.7: LLAMA_ARG_NO_X makes the option false whatever its value, and beats LLAMA_ARG_X
    env = {"LLAMA_ARG_NO_CONT_BATCHING": value, "LLAMA_ARG_CONT_BATCHING": "1"}
    assert _opt(resolve_in([], env), "cont-batching") == (False, "env:LLAMA_ARG_NO_CONT_BATCHING")


def test_bool_pair_cli_spellings(resolve_in):
    # rule 1.10: positive spellings set true, negative ones false; rule 1.4: CLI beats env
    env = {"LLAMA_ARG_NO_CONT_BATCHING": "1"}
    assert _opt(resolve_in(["-cb"], env), "cont-batching") == (True, "cli:-cb")
    assert _opt(resolve_in(["-nocb"]), "cont-batching") == (False, "cli:-nocb")
    assert _opt(resolve_in(["--no-kv-offload"]), "kv-offload") == (False, "cli:--no-kv-offload")


def test_mlxd_own_pair_has_its_no_alias(resolve_in):
    # design.md: mlxd's own options read MLXD_*; pairs follow the same existence rule as rule 1.7
    env = {"MLXD_WATCH_CONFIG": "1", "MLXD_NO_WATCH_CONFIG": ""}
    assert _opt(resolve_in([], env), "watch-config") == (False, "env:MLXD_NO_WATCH_CONFIG")
    assert _opt(resolve_in(["--watch-config"], env), "watch-config") == (True, "cli:--watch-config")



def test_watch_config_defaults_to_on_with_a_toml_file(resolve_in, tmp_path: Path):
    # docs/precedence.md rule 3.2: a default that follows from --config, with its own provenance; any source wins
    toml = write(tmp_path / "mlxd.toml", "ctx-size = 8\n")
    assert _opt(resolve_in([]), "watch-config") == (False, "default")
    with_file = resolve_in(["--config", toml])
    assert _opt(with_file, "watch-config") == (True, "default:--config")
    assert not with_file.explicit("watch-config")
    assert _opt(resolve_in([], {"MLXD_CONFIG": toml}), "watch-config") == (True, "default:--config")
    assert _opt(resolve_in(["--config", toml, "--no-watch-config"]), "watch-config") == (
        False, "cli:--no-watch-config")
    write(tmp_path / "watched.toml", "watch-config = false\n")
    assert _opt(resolve_in(["--config", str(tmp_path / "watched.toml")]), "watch-config") == (
        False, f"toml:{tmp_path}/watched.toml:1")

# --- accumulating options -----------------------------------------------------------------------------------------

def test_api_key_env_and_cli_accumulate(resolve_in):
    # rule 1.4 caveat: appending handlers add the CLI value to the env value
    resolved = resolve_in(["--api-key", "c1", "--api-key", "c2,c3"], {"LLAMA_API_KEY": "e1,e2"})
    assert resolved.config.api_key == ["e1", "e2", "c1", "c2", "c3"]
    assert resolved.provenance["api-key"] == "cli:--api-key"


def test_alias_and_tags_accumulate(resolve_in):
    # rule 1.4 caveat: -a/--alias and --tags append
    resolved = resolve_in(["-a", "b", "--tags", "t2"], {"LLAMA_ARG_ALIAS": "a", "LLAMA_ARG_TAGS": "t1"})
    assert resolved.config.alias == ["a", "b"]
    assert resolved.config.tags == ["t1", "t2"]


def test_accumulation_does_not_reach_into_files(resolve_in, tmp_path: Path):
    # rule 1.4 speaks of env and CLI; a file value is replaced by the layers above it
    toml = write(tmp_path / "a.toml", 'alias = ["from-file"]\n')
    assert resolve_in(["--config", toml], {"LLAMA_ARG_ALIAS": "e"}).config.alias == ["e"]
    assert resolve_in(["--config", toml]).config.alias == ["from-file"]


def test_repeated_appending_option_keeps_every_value(resolve_in):
    # rule 1.9: appending handlers keep every value
    assert resolve_in(["--lora", "a", "--lora", "b,c"]).config.lora == ["a", "b", "c"]


# --- TOML ---------------------------------------------------------------------------------------------------------

def test_toml_keys_take_any_spelling_and_negatives_invert(resolve_in, tmp_path: Path):
    # design.md principle 1 and issue 2: keys are spellings without dashes, as in presets (rule 2.6, 2.7)
    toml = write(tmp_path / "a.toml", 'c = 512\nno-cont-batching = true\napi-key = "k1,k2"\nngl = 99\n')
    resolved = resolve_in(["--config", toml])
    assert (resolved.config.ctx_size, resolved.config.cont_batching) == (512, False)
    assert resolved.config.api_key == ["k1", "k2"]
    assert resolved.config.n_gpu_layers == "99"
    assert resolved.provenance["cont-batching"] == f"toml:{toml}:2"


def test_toml_unknown_key_has_did_you_mean(resolve_in, tmp_path: Path):
    # rule 2.6: exact keys, no '_' rewriting
    toml = write(tmp_path / "a.toml", "ctx_size = 1\n")
    with pytest.raises(ConfigError) as info:
        resolve_in(["--config", toml])
    assert "did you mean 'ctx-size'" in str(info.value)
    assert info.value.problems[0].source == f"toml:{toml}:1"


# --- presets and router mode --------------------------------------------------------------------------------------

PRESET = """
version = 1
[*]
ctx-size = 1024
temp = 0.3

[qwen]
model = /models/qwen
ctx-size = 2048
no-cache-prompt = true
LLAMA_ARG_NO_CONT_BATCHING = false

[llama]
model = /models/llama
LLAMA_ARG_NO_CONT_BATCHING = true
"""


def _model(resolved, model, name):  # type: ignore[no-untyped-def]
    entry = explain_data(resolved)["models"][model][name]
    return entry["value"], entry["source"]


def test_preset_star_is_laid_under_each_model(resolve_in, tmp_path: Path):
    # rule 2.3: [*] applies to every model, the model's own keys win
    ini = write(tmp_path / "p.ini", PRESET)
    resolved = resolve_in(["--models-preset", ini])
    assert resolved.is_router
    assert _model(resolved, "qwen", "ctx-size") == (2048, "preset:[qwen]")
    assert _model(resolved, "llama", "ctx-size") == (1024, "preset:[*]")
    assert _model(resolved, "llama", "temperature") == (0.3, "preset:[*]")


def test_preset_negative_key_inverts_but_no_env_key_does_not(resolve_in, tmp_path: Path):
    # rule 2.7: no-cache-prompt = true is false; LLAMA_ARG_NO_CONT_BATCHING = true is stored as true (the quirk)
    ini = write(tmp_path / "p.ini", PRESET)
    resolved = resolve_in(["--models-preset", ini])
    assert _model(resolved, "qwen", "cache-prompt") == (False, "preset:[qwen]")
    assert _model(resolved, "llama", "cont-batching") == (True, "preset:[llama]")
    assert _model(resolved, "qwen", "cont-batching") == (False, "preset:[qwen]")


def test_preset_keys_are_exact(resolve_in, tmp_path: Path):
    # rule 2.6: ctx_size is rejected with "option 'ctx_size' not recognized in preset '<name>'"
    ini = write(tmp_path / "p.ini", "[m]\nctx_size = 1\n")
    with pytest.raises(ConfigError, match="option 'ctx_size' not recognized in preset 'm'; did you mean 'ctx-size'"):
        resolve_in(["--models-preset", ini])


def test_router_cli_flags_beat_presets_and_env_sits_below(resolve_in, tmp_path: Path):
    # rules 2.10, 2.11 and 2.15: router CLI > preset > inherited env
    ini = write(tmp_path / "p.ini", PRESET)
    resolved = resolve_in(["--models-preset", ini, "--temp", "0"], {"LLAMA_ARG_CTX_SIZE": "99"})
    assert _model(resolved, "qwen", "temperature") == (0.0, "cli:--temp")
    assert _model(resolved, "llama", "ctx-size") == (1024, "preset:[*]")  # env loses to [*]
    assert _opt(resolved, "ctx-size") == (99, "env:LLAMA_ARG_CTX_SIZE")  # the router's own value


def test_router_reserved_cli_flags_are_not_overlaid(resolve_in, tmp_path: Path):
    # rule 2.10: reserved router arguments (here --alias, --api-key) are removed from the overlay
    ini = write(tmp_path / "p.ini", "[m]\nmodel = /x\nalias = mine\n")
    resolved = resolve_in(["--models-preset", ini, "--alias", "router", "--api-key", "k"])
    assert _model(resolved, "m", "alias") == (["mine"], "preset:[m]")
    assert _model(resolved, "m", "api-key")[1] == "default"


def test_models_dir_below_preset_section(resolve_in, tmp_path: Path):
    # rule 2.9: cache < models-dir < preset; a preset section merges key by key
    for name in ("qwen", "other"):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "config.json").write_text("{}")
    ini = write(tmp_path / "p.ini", "[qwen]\nctx-size = 64\n")
    resolved = resolve_in(["--models-dir", str(tmp_path / "models"), "--models-preset", ini],
                          store_models={"other": "/store/other", "cached": "/store/cached"})
    assert _model(resolved, "qwen", "model")[0] == str(tmp_path / "models/qwen")
    assert _model(resolved, "qwen", "ctx-size") == (64, "preset:[qwen]")
    assert resolved.models["qwen"].source == "preset"
    assert _model(resolved, "other", "model") == (str(tmp_path / "models/other"), f"models-dir:{tmp_path}/models/other")
    assert _model(resolved, "cached", "model") == ("/store/cached", "store")


def test_preset_section_names_are_normalised_and_empty_default_dropped(resolve_in, tmp_path: Path):
    # rules 2.4 and 2.5
    ini = write(tmp_path / "p.ini", "[org/repo:model-q4_k_m]\nctx-size = 8\n")
    resolved = resolve_in(["--models-preset", ini])
    assert list(resolved.models) == ["org/repo:Q4_K_M"]


def test_toml_models_tables_are_per_model_overlays(resolve_in, tmp_path: Path):
    # design.md: preset section or TOML [models.NAME], below the router's CLI flags
    toml = write(tmp_path / "a.toml", "temp = 0.9\n\n[models.qwen]\nmodel = \"/q\"\ntemp = 0.1\n")
    resolved = resolve_in(["--config", toml])
    assert _model(resolved, "qwen", "temperature") == (0.1, f"toml:{toml}:5")
    assert _opt(resolved, "temperature") == (0.9, f"toml:{toml}:1")
    assert _model(resolve_in(["--config", toml, "--temp", "0.5"]), "qwen", "temperature") == (0.5, "cli:--temp")


def test_preset_only_keys(resolve_in, tmp_path: Path):
    # rule 2.8: load-on-startup, stop-timeout and dedup-cache-models exist only in presets
    ini = write(tmp_path / "p.ini", "[m]\nmodel = /x\nload-on-startup = true\nstop-timeout = 3\n")
    assert resolve_in(["--models-preset", ini]).models["m"].extras == {"load-on-startup": True, "stop-timeout": 3}
    with pytest.raises(ConfigError, match="invalid argument: --load-on-startup"):
        resolve_in(["--load-on-startup"])


# --- admin --------------------------------------------------------------------------------------------------------

def test_admin_overrides_beat_the_command_line(resolve_in):
    # design.md: ... < command line < admin overrides
    resolved = resolve_in(["--temp", "0.5"])
    updated = apply_overrides(resolved, {"temperature": 0.2})
    assert _opt(updated, "temperature") == (0.2, "admin")
    assert _opt(resolved, "temperature") == (0.5, "cli:--temp")
    assert updated.config_hash != resolved.config_hash


def test_toml_star_table_is_laid_under_every_model(resolve_in, tmp_path: Path):
    # rule 2.3's [*], written as TOML [models."*"]; a model's own table still wins
    toml = write(tmp_path / "a.toml", '[models."*"]\nc = 16\n\n[models.a]\nmodel = "/a"\n\n'
                                      '[models.b]\nmodel = "/b"\nc = 32\n')
    resolved = resolve_in(["--config", toml])
    assert _model(resolved, "a", "ctx-size") == (16, f"toml:{toml}:2")
    assert _model(resolved, "b", "ctx-size") == (32, f"toml:{toml}:9")
    assert set(resolved.models) == {"a", "b"}


def test_hf_repo_wins_over_model_with_a_warning(resolve_in):
    # design.md "Precedence": --hf-repo wins over -m
    resolved = resolve_in(["-m", "/models/x", "-hf", "mlx-community/Qwen3-0.6B-4bit"])
    assert not resolved.is_router
    assert any("--hf-repo" in w and "wins over -m" in w for w in resolved.warnings)


def test_tools_are_refused_so_cors_origins_keep_their_default(resolve_in):
    # rule 1.12 (with --tools and no explicit --cors-origins, CORS origins become localhost) cannot fire: mlxd
    # serves no built-in tools and refuses --tools, so the origins stay at their default
    with pytest.raises(ConfigError, match="tools='read_file': not supported by mlxd"):
        resolve_in(["--tools", "read_file"])
    assert _opt(resolve_in([]), "cors-origins") == ("*", "default")


def test_files_read_are_listed_for_watching(resolve_in, tmp_path: Path):
    toml = write(tmp_path / "a.toml", "c = 1\n")
    ini = write(tmp_path / "p.ini", "[m]\nmodel = /m\n")
    user = write(tmp_path / "xdg/llama.cpp/config.ini", "[*]\nport = 1\n")
    assert resolve_in(["--config", toml, "--models-preset", ini]).files == (user, toml, ini)
