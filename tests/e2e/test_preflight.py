"""Every configuration ``serve`` refuses, ``mlxd config check`` refuses too: the same error lines, exit status 2, and
the daemon stops before it listens (mlxd.daemon.preflight).

All the processes of the matrix start at once, in one fixture, so the matrix costs about as long as its slowest
process rather than the sum of them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlxd.engine.chat import UPSTREAM_TEMPLATE_NAMES, ChatTemplateError, load_chat_template
from tests.e2e.conftest import BIN


@dataclass(frozen=True)
class Case:
    """A refused configuration: its command line (built in a scratch directory) and a part of its one error."""

    args: Callable[[Path, Path], list[str]]  # (scratch directory, tiny checkpoint) -> arguments
    expected: str


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _no_weights(d: Path) -> str:
    _write(d / "noweights" / "config.json", "{}")
    return str(d / "noweights")


def _tcp_admin_toml(d: Path) -> str:
    # the TCP admin listener of docs/configuration.md's example TOML, without the token file it names there
    return str(_write(d / "mlxd.toml", 'ctx-size = 8192\nadmin-listen = "127.0.0.1:8081"\n'))


def _refused_template_name() -> tuple[str, str] | None:
    """A b10621 built-in template name that the model's load refuses (one mlxd does not render), with its refusal;
    None once every name is served. Asked of the loader itself, so the matrix follows what mlxd ships."""
    for name in sorted(UPSTREAM_TEMPLATE_NAMES):
        try:
            load_chat_template(None, chat_template=name)
        except ChatTemplateError as exc:
            return name, exc.message
    return None


_REFUSED_NAME = _refused_template_name()

CASES: dict[str, Case] = {
    "tcp-admin-without-token": Case(lambda d, m: ["-m", str(m), "--admin-listen", "127.0.0.1:0"],
                                    "a TCP admin listener requires --admin-token-file"),
    "toml-tcp-admin-without-token": Case(lambda d, m: ["-m", str(m), "--config", _tcp_admin_toml(d)],
                                         "a TCP admin listener requires --admin-token-file"),
    "api-key-file-missing": Case(lambda d, m: ["-m", str(m), "--api-key-file", str(d / "no-keys")],
                                 "cannot read the key file: No such file or directory"),
    **({"chat-template-name": Case(lambda d, m: ["-m", str(m), "--chat-template", _REFUSED_NAME[0]],
                                   _REFUSED_NAME[1])} if _REFUSED_NAME else {}),
    "chat-template-bad-jinja": Case(lambda d, m: ["-m", str(m), "--chat-template", "{% for %}"],
                                    "invalid chat template"),
    "chat-template-file-missing": Case(lambda d, m: ["-m", str(m), "--chat-template-file", str(d / "t.jinja")],
                                       "cannot read"),
    "model-missing": Case(lambda d, m: ["-m", str(d / "no-model")], "no such file or directory"),
    "model-without-weights": Case(lambda d, m: ["-m", _no_weights(d)], "no model*.safetensors weights"),
    "hf-repo-offline-not-cached": Case(lambda d, m: ["--hf-repo", "mlx-community/not-here", "--offline",
                                                     "--model-store-root", str(d / "store")],
                                       "not in the local cache"),
    "rank-pooling-without-a-rank-head": Case(lambda d, m: ["-m", str(m), "--embeddings", "--pooling", "rank"],
                                             "needs a model with a classification (rank) head"),
    "lora-missing": Case(lambda d, m: ["-m", str(m), "--lora", str(d / "no-adapter")], "no such directory"),
    "tls-files-missing": Case(lambda d, m: ["-m", str(m), "--ssl-cert-file", str(d / "c.pem"),
                                            "--ssl-key-file", str(d / "k.pem")], "cannot load certificate/key"),
    "log-file-is-a-directory": Case(lambda d, m: ["-m", str(m), "--log-file", str(d)],
                                    "refusing to log to a directory"),
}


@dataclass
class Outcome:
    check: subprocess.CompletedProcess[str]
    serve: subprocess.CompletedProcess[str]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MLXD_", "HF_"))}
    env["XDG_CONFIG_HOME"] = str(home)  # no user config.ini
    env["XDG_RUNTIME_DIR"] = str(home)  # the default admin socket's directory, private to this test
    return env


# Processes running at once: enough to overlap their start-up, few enough for a small shared machine.
AT_ONCE = 6


@pytest.fixture(scope="module")
def outcomes(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """``mlxd config check -- ARGS`` and ``mlxd-server ARGS`` for every case, AT_ONCE processes at a time."""
    pending: list[tuple[str, list[str], dict[str, str], Path]] = []
    for name, case in CASES.items():
        scratch = tmp_path_factory.mktemp(name)
        args = case.args(scratch, tiny_checkpoint)
        pending.append((f"{name}/check", [str(BIN / "mlxd"), "config", "check", "--", *args], _env(scratch), scratch))
        pending.append((f"{name}/serve", [str(BIN / "mlxd-server"), *args, "--host", "127.0.0.1", "--port", "0"],
                        _env(scratch), scratch))
    done: dict[str, subprocess.CompletedProcess[str]] = {}
    running: list[tuple[str, subprocess.Popen[str]]] = []
    try:
        while pending or running:
            while pending and len(running) < AT_ONCE:
                key, argv, env, cwd = pending.pop(0)
                running.append((key, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                      text=True, env=env, cwd=cwd, stdin=subprocess.DEVNULL)))
            key, process = running.pop(0)
            try:
                out, err = process.communicate(timeout=180)
            except subprocess.TimeoutExpired:  # a daemon that did start: stop it, and let its test say so
                process.kill()
                out, err = process.communicate()
            done[key] = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    finally:
        for _, process in running:
            process.kill()
            process.wait()
    return {name: Outcome(done[f"{name}/check"], done[f"{name}/serve"]) for name in CASES}


def _errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in proc.stderr, proc.stderr
    return [line for line in proc.stderr.splitlines() if line.startswith("error: ")]


@pytest.mark.parametrize("name", sorted(CASES))
def test_check_refuses_what_serve_refuses(outcomes: dict[str, Outcome], name: str) -> None:
    outcome = outcomes[name]
    serve_errors = _errors(outcome.serve)
    assert outcome.serve.returncode == 2, outcome.serve.stderr
    assert "listening" not in outcome.serve.stdout + outcome.serve.stderr
    assert len(serve_errors) == 1 and CASES[name].expected in serve_errors[0], serve_errors
    assert outcome.check.returncode == 2, outcome.check.stdout + outcome.check.stderr
    assert _errors(outcome.check) == serve_errors


def test_check_passes_what_serve_serves(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """The other direction, for one configuration of each kind the matrix refuses (no daemon is started here:
    the e2e suite starts these options for real)."""
    token = _write(tmp_path / "token", "s3cret\n")
    keys = _write(tmp_path / "keys", "# keys\nk1\n")
    argv = [str(BIN / "mlxd"), "config", "check", "--", "-m", str(tiny_checkpoint), "--admin-listen", "127.0.0.1:0",
            "--admin-token-file", str(token), "--api-key-file", str(keys), "--chat-template", "chatml",
            "--log-file", str(tmp_path / "mlxd.log")]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(tmp_path), timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "configuration: ok (single model)\n"
    assert not (tmp_path / "mlxd.log").exists()  # checked, not created


def test_check_of_a_file_refuses_as_serve_with_that_file(tmp_path: Path) -> None:
    """``mlxd config check FILE``: the file as serve reads it, so the TOML example above is refused by itself."""
    toml = _tcp_admin_toml(tmp_path)
    done = subprocess.run([str(BIN / "mlxd"), "config", "check", toml], capture_output=True, text=True,
                          env=_env(tmp_path), timeout=120, check=False)
    assert done.returncode == 2
    assert _errors(done) == [f"error: toml:{toml}:2: admin-listen='127.0.0.1:8081': "
                             "a TCP admin listener requires --admin-token-file"]
