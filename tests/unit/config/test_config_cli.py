"""The real console scripts in a subprocess: exit status 2 and one diagnostic line per problem on bad input,
never a traceback; explain's JSON shape; check on TOML and presets files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.config.conftest import write

MLXD = str(Path(sys.executable).parent / "mlxd")


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MLXD_"))}
    base["XDG_CONFIG_HOME"] = str(cwd or Path("/nonexistent"))
    return subprocess.run([MLXD, *args], capture_output=True, text=True, env={**base, **(env or {})},
                          timeout=60, check=False)


def _errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in proc.stderr
    return [line for line in proc.stderr.splitlines() if line.startswith("error: ")]


def test_unknown_option_and_bad_values_one_line_each(tmp_path: Path) -> None:
    proc = run("config", "explain", "--", "--ctx-sise", "4", "--port", "http", "-dev", "CUDA0",
               env={"LLAMA_ARG_JINJA": "maybe"}, cwd=tmp_path)
    assert proc.returncode == 2
    errors = _errors(proc)
    assert len(errors) == 4, proc.stderr
    assert "error: cli: invalid argument: --ctx-sise; did you mean --ctx-size?" in errors
    assert "error: cli:--port: port='http': expected an integer" in errors
    assert any(e.startswith("error: env:LLAMA_ARG_JINJA: jinja='maybe': invalid boolean value") for e in errors)
    assert any(e.startswith("error: cli:-dev: device='CUDA0': not supported by mlxd") for e in errors)


def test_malformed_toml_names_line_and_column(tmp_path: Path) -> None:
    toml = write(tmp_path / "bad.toml", "ctx-size = 1\nport = = 2\n")
    proc = run("config", "check", toml, cwd=tmp_path)
    assert proc.returncode == 2
    [error] = _errors(proc)
    assert error.startswith(f"error: toml:{toml}:2:") and "malformed TOML" in error


def test_unknown_toml_key_and_wrong_type(tmp_path: Path) -> None:
    toml = write(tmp_path / "bad.toml", 'ctx_size = 1\ntemp = "hot"\n')
    proc = run("config", "explain", "--config", toml, cwd=tmp_path)
    assert proc.returncode == 2
    assert _errors(proc) == [f"error: toml:{toml}:1: ctx_size: unknown TOML key; did you mean 'ctx-size'?",
                             f"error: toml:{toml}:2: temperature='hot': expected a number"]


def test_mlxd_server_refuses_before_loading(tmp_path: Path) -> None:
    proc = subprocess.run([str(Path(sys.executable).parent / "mlxd-server"), "-m", "model.gguf"],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": os.environ.get("PATH", ""), "XDG_CONFIG_HOME": str(tmp_path)})
    assert proc.returncode == 2
    assert "model='model.gguf': not supported by mlxd" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_explain_json_every_option_with_value_and_source(tmp_path: Path) -> None:
    proc = run("config", "explain", "--format", "json", "--", "-c", "2048", "--api-key", "s3cret", "--metrics",
               env={"LLAMA_ARG_N_PARALLEL": "2"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    options = json.loads(proc.stdout)["options"]
    assert options["ctx-size"] == {"value": 2048, "source": "cli:-c"}
    assert options["parallel"] == {"value": 2, "source": "env:LLAMA_ARG_N_PARALLEL"}
    assert options["metrics"] == {"value": True, "source": "cli:--metrics"}
    assert options["props"] == {"value": False, "source": "default"}
    assert options["api-key"]["value"] == ["<redacted>"]
    assert "s3cret" not in proc.stdout
    assert json.loads(proc.stdout)["models"] == {}  # no model given: router mode, with nothing defined
    assert set(options) >= {"n-predict", "temperature", "n-gpu-layers", "cont-batching", "log-verbosity"}


@pytest.mark.parametrize("name,text", [("ok.toml", "ctx-size = 8\n[models.a]\nmodel = '/a'\n"),
                                       ("ok.ini", "[a]\nmodel = /a\nctx-size = 8\n")])
def test_check_accepts_good_files(tmp_path: Path, name: str, text: str) -> None:
    path = write(tmp_path / name, text)
    proc = run("config", "check", path, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{path}: ok")


def test_check_rejects_unknown_preset_key(tmp_path: Path) -> None:
    path = write(tmp_path / "p.ini", "[a]\nctx_size = 8\n")
    proc = run("config", "check", path, cwd=tmp_path)
    assert proc.returncode == 2
    assert _errors(proc) == [f"error: {path}:2: ctx_size: option 'ctx_size' not recognized in preset 'a'; "
                             "did you mean 'ctx-size'?"]


def test_unavailable_subcommand_is_a_clear_error(tmp_path: Path) -> None:
    proc = run("no-such-command", cwd=tmp_path)
    assert proc.returncode == 2
    assert "unknown command 'no-such-command'" in proc.stderr


def test_server_help_and_version_print_and_exit(tmp_path: Path) -> None:
    server = str(Path(sys.executable).parent / "mlxd-server")
    help_proc = subprocess.run([server, "-m", "/nowhere", "--help"], capture_output=True, text=True, timeout=60,
                               check=False)
    assert help_proc.returncode == 0
    assert help_proc.stdout.startswith("usage: mlxd-server")
    assert "-ngl, --gpu-layers, --n-gpu-layers N" in help_proc.stdout
    version = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert version.returncode == 0 and "b10621" in version.stdout


def test_explain_shows_what_a_checkpoint_serves(tmp_path: Path, tiny_checkpoint: Path) -> None:
    proc = run("config", "explain", "--format", "json", "--", "-m", str(tiny_checkpoint), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    options = json.loads(proc.stdout)["options"]
    generation = json.loads((tiny_checkpoint / "generation_config.json").read_text())
    source = "checkpoint:generation_config.json"
    assert options["temperature"] == {"value": generation["temperature"], "source": source}
    assert options["top-k"] == {"value": generation["top_k"], "source": source}
    # `-c 0` means the checkpoint's training context: explain shows that number and where it came from.
    trained = json.loads((tiny_checkpoint / "config.json").read_text())["max_position_embeddings"]
    assert options["ctx-size"] == {"value": trained, "source": "checkpoint:config.json"}
    given = run("config", "explain", "--format", "json", "--", "-m", str(tiny_checkpoint), "-c", "512", cwd=tmp_path)
    assert json.loads(given.stdout)["options"]["ctx-size"] == {"value": 512, "source": "cli:-c"}


def test_check_refuses_an_empty_file(tmp_path: Path) -> None:
    empty = write(tmp_path / "mlxd.toml", "")
    proc = run("config", "check", empty, cwd=tmp_path)
    assert proc.returncode == 2 and "the file is empty" in proc.stderr, proc.stderr
    commented = write(tmp_path / "defaults.toml", "# every option at its default\n")
    assert run("config", "check", commented, cwd=tmp_path).returncode == 0
