"""Refusals (issue 2, "What to build" 5): GGUF/GGML-only options parse and are refused before any model loads,
with a diagnostic naming the value, why, and the alternative; their inert values are accepted silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.config import ConfigError, table
from tests.unit.config.conftest import write

REFUSED = [
    (["--hf-file", "model-q4.gguf"], "hf-file", "GGUF file"),
    (["--model-url", "https://x/y.gguf"], "model-url", "GGUF"),
    (["-dr", "ai/smollm2"], "docker-repo", "Docker Hub"),
    (["-m", "/models/qwen.Q4_K_M.gguf"], "model", "GGUF files cannot be loaded"),
    (["-hf", "ggml-org/gemma-3-1b-it-GGUF:Q4_K_M"], "hf-repo", "':QUANT' tag"),
    (["--mmproj", "proj.gguf"], "mmproj", "multimodal"),
    (["--rpc", "10.0.0.2"], "rpc", "HOST:PORT"),  # a peer without its port (mlxd rpc-server)
    (["--mlock"], "mlock", "lock"),
    (["--numa", "distribute"], "numa", "NUMA"),
    (["-dev", "CUDA0"], "device", "ggml backend names"),
    (["-ctk", "iq4_nl"], "cache-type-k", "codebook"),
    (["-ctv", "iq4_nl"], "cache-type-v", "codebook"),
    (["--fim-qwen-7b-default"], "fim-qwen-7b-default", "built-in presets"),
    (["--spec-type", "draft-eagle3"], "spec-type", "only draft-simple"),
    (["--control-vector", "cv.gguf"], "control-vector", "control vectors"),
    (["-ot", "exps=CPU"], "override-tensor", "placement"),
    (["--draft", "5"], "draft-max", "removed"),
    (["-fa", "off"], "flash-attn", "fused attention"),
    (["-C", "ff"], "cpu-mask", "affinity"),
]


@pytest.mark.parametrize("argv,option,why", REFUSED, ids=[r[1] for r in REFUSED])
def test_refused_with_value_reason_and_alternative(resolve_in, argv, option, why):
    with pytest.raises(ConfigError) as info:
        resolve_in(argv)
    [problem] = info.value.problems
    assert problem.option == option
    assert problem.source == f"cli:{argv[0]}"
    assert why in problem.message
    line = problem.render()
    assert (argv[1] if len(argv) > 1 else "true") in line  # the value
    assert ";" in problem.message  # reason; alternative


# -ngl N and -ngl 0 are decided against the checkpoint's layer count and MLX's device when the model loads
# (tests/engine/test_placement.py), so any count is accepted here.
INERT = [["-ngl", "99"], ["-ngl", "all"], ["-ngl", "auto"], ["-ngl", "-1"], ["-ngl", "0"], ["-ngl", "33"],
         ["-dev", "none"], ["-devd", "none"], ["-ngld", "99"], ["-fa", "on"], ["-fa", "auto"],
         ["--threads", "-1"], ["-t", "8"], ["-tb", "4"], ["-ctk", "f16"], ["-ctv", "f16"], ["--spec-type", "none"],
         ["-nkvo"], ["--no-mmap"], ["--no-repack"], ["--poll", "10"], ["-sm", "layer"], ["-mg", "0"],
         ["--no-mmproj"], ["--spec-draft-n-max", "3"], ["-dio"], ["--fit", "off"],
         ["--spec-draft-p-split", "0.5"]]  # b10621 parses it and reads it nowhere


@pytest.mark.parametrize("argv", INERT, ids=[" ".join(a) for a in INERT])
def test_inert_values_are_accepted(resolve_in, argv):
    spec = table().by_spelling[argv[0]]
    resolved = resolve_in(argv)
    assert resolved.provenance[spec.name] == f"cli:{argv[0]}"
    assert resolved.warnings == ()


def test_every_problem_is_reported_at_once(resolve_in):
    with pytest.raises(ConfigError) as info:
        resolve_in(["--mlock", "-dev", "Metal", "--numa", "isolate", "-c", "x"])
    assert {p.option for p in info.value.problems} == {"mlock", "device", "numa", "ctx-size"}


def test_models_dir_with_model_contradicts(resolve_in, tmp_path: Path):
    (tmp_path / "m").mkdir()
    with pytest.raises(ConfigError, match="models-dir.*cannot be combined with a model"):
        resolve_in(["--models-dir", str(tmp_path / "m"), "-m", "/models/qwen"])


def test_models_preset_with_model_argument_contradicts(resolve_in, tmp_path: Path):
    ini = write(tmp_path / "p.ini", "[a]\nmodel = /a\n")
    with pytest.raises(ConfigError, match="cannot be combined with a model argument"):
        resolve_in(["--models-preset", ini, "-hf", "mlx-community/Qwen3-0.6B-4bit"])


def test_rope_scale_and_freq_scale_must_be_reciprocal(resolve_in):
    assert resolve_in(["--rope-scale", "4", "--rope-freq-scale", "0.25"]).config.rope_scale == 4.0
    with pytest.raises(ConfigError, match="rope-freq-scale 1/N"):
        resolve_in(["--rope-scale", "4", "--rope-freq-scale", "0.5"])


def test_refusal_inside_a_preset_names_the_model(resolve_in, tmp_path: Path):
    ini = write(tmp_path / "p.ini", "[bad]\nm = /models/x.gguf\n")
    with pytest.raises(ConfigError) as info:
        resolve_in(["--models-preset", ini])
    [problem] = info.value.problems
    assert problem.source == "preset:[bad]"
    assert problem.message.startswith("model 'bad': not supported by mlxd")


def test_refusals_apply_to_env_and_toml_too(resolve_in, tmp_path: Path):
    with pytest.raises(ConfigError) as info:
        resolve_in([], {"LLAMA_ARG_MLOCK": "1"})
    assert info.value.problems[0].source == "env:LLAMA_ARG_MLOCK"
    toml = write(tmp_path / "a.toml", '\ndevice = "CUDA0"\n')
    with pytest.raises(ConfigError) as info:
        resolve_in(["--config", toml])
    assert info.value.problems[0].source == f"toml:{toml}:2"


# Options b10621 honours and mlxd cannot: refused when they ask for what mlxd lacks, accepted at their default.
# (argv, option, value shown, words of the reason, words of the alternative)
REFUSED_UNLESS_DEFAULT = [
    (["--tools", "all"], "tools", "all", "web UI", "`tools`"),
    (["--tools-runtime", "docker"], "tools-runtime", "docker", "web UI", "`tools`"),
    (["--mcp-servers-config", "mcp.json"], "mcp-servers-config", "mcp.json", "MCP proxy", "in the client"),
    (["--mcp-servers-json", "{}"], "mcp-servers-json", "{}", "MCP proxy", "in the client"),
    (["--agent"], "agent", "true", "agent mode", "leave it disabled"),
    (["--swa-full"], "swa-full", "true", "sliding-window", "leave it unset"),
    (["-ctxcp", "4"], "swa-checkpoints", "4", "context checkpoints are not yet", "or 0"),
    (["--perf"], "perf", "true", "performance counters", "`timings`"),
    (["--yarn-ext-factor", "0.5"], "yarn-ext-factor", "0.5", "YaRN", "1.0"),
    (["--yarn-attn-factor", "2"], "yarn-attn-factor", "2.0", "YaRN", "1.0"),
    (["--reasoning-preserve"], "reasoning-preserve", "true", "as the chat template does", "--chat-template-kwargs"),
    (["--log-prompts-dir", "/var/log/p"], "log-prompts-dir", "/var/log/p", "prompts to files", "/apply-template"),
]


@pytest.mark.parametrize("argv,option,value,why,instead", REFUSED_UNLESS_DEFAULT,
                         ids=[r[1] for r in REFUSED_UNLESS_DEFAULT])
def test_refused_unless_default_names_value_reason_and_alternative(resolve_in, argv, option, value, why, instead):
    with pytest.raises(ConfigError) as info:
        resolve_in(argv)
    [problem] = info.value.problems
    assert (problem.option, problem.source, problem.value) == (option, f"cli:{argv[0]}", value)
    assert why in problem.message and instead in problem.message.split(";", 1)[1], problem.message


ACCEPTED_DEFAULTS = [["--jinja"], ["--no-agent"], ["-ctxcp", "0"], ["-cms", "64"],
                     ["--cache-idle-slots"], ["--no-cache-idle-slots"], ["--no-perf"], ["--yarn-ext-factor", "-1"], ["--yarn-attn-factor", "1"]]


@pytest.mark.parametrize("argv", ACCEPTED_DEFAULTS, ids=[" ".join(a) for a in ACCEPTED_DEFAULTS])
def test_their_default_and_inert_values_are_accepted(resolve_in, argv):
    spec = table().by_spelling[argv[0]]
    assert resolve_in(argv).provenance[spec.name] == f"cli:{argv[0]}"
