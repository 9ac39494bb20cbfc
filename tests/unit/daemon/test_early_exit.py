"""llama-server's print-and-exit options through the real ``mlxd-server`` console script: each prints what
b10621 prints (as it applies to MLX) and exits 0 before anything is served."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.unit.daemon.test_discovery import cache_repo

SERVER = str(Path(sys.executable).parent / "mlxd-server")


def server(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MLXD_"))}
    env["XDG_CONFIG_HOME"] = "/nonexistent"
    # a port nothing could bind: the daemon would fail if the option did not exit first
    done = subprocess.run([SERVER, *args, "--port", "1"], capture_output=True, text=True, env=env, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done


def test_list_devices_prints_mlx_devices_in_b10621_lines() -> None:
    lines = server("--list-devices").stdout.splitlines()
    assert lines[0] == "Available devices:"
    entries = [re.fullmatch(r"  (gpu|cpu): .+ \((\d+) MiB, (\d+) MiB free\)", line) for line in lines[1:]]
    assert entries and all(entries), lines
    import mlx.core as mx

    assert entries[0][1] == ("gpu" if mx.default_device().type == mx.gpu else "cpu")  # the default device first


def test_cache_list_lists_the_model_stores_mlx_checkpoints(tmp_path: Path, tiny_checkpoint: Path) -> None:
    store = tmp_path / "store"
    cache_repo(store, "owner/tiny", tiny_checkpoint)
    cache_repo(store, "owner/alpha", tiny_checkpoint)
    cache_repo(store, "owner/partial", None)  # no weights: not a checkpoint mlxd could serve
    listed = server("-cl", "--model-store-root", str(store)).stdout
    assert listed == "number of models in cache: 2\n   1. owner/alpha\n   2. owner/tiny\n"


def test_completion_bash_completes_option_spellings_and_values(tmp_path: Path) -> None:
    script = tmp_path / "mlxd-server.bash"
    script.write_text(server("--completion-bash").stdout)
    (tmp_path / "grammar.gbnf").write_text("root ::= \"x\"\n")

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in words)
        probe = (f"source {script}; COMP_WORDS=(mlxd-server {line}); COMP_CWORD={len(words)}; "
                 f"_mlxd_server_completions; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=30,
                              check=True)
        return done.stdout.split()

    assert complete("--ctx-si") == ["--ctx-size"]
    assert "--cache-list" in complete("--ca") and "--admin-listen" in complete("--admin-l")  # mlxd's own too
    assert complete("--flash-attn", "") == ["on", "off", "auto"]
    assert complete("--grammar-file", "gram") == ["grammar.gbnf"]
