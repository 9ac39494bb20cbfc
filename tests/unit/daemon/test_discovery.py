"""Router discovery of the model store: ``owner/name`` snapshots of the hub cache that are MLX checkpoints."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from mlxd.daemon.discovery import resolve_serving


def cache_repo(store: Path, repo_id: str, checkpoint: Path | None) -> None:
    """A hub cache entry in huggingface_hub's layout; ``checkpoint`` None leaves the snapshot without weights."""
    repo = store / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    if checkpoint is None:
        (snapshot / "config.json").write_text("{}")
    else:
        shutil.copytree(checkpoint, snapshot, dirs_exist_ok=True)


def test_store_snapshots_join_the_router_below_models_dir_and_presets(tmp_path: Path, tiny_checkpoint: Path) -> None:
    store, models = tmp_path / "store", tmp_path / "models"
    cache_repo(store, "owner/tiny", tiny_checkpoint)
    cache_repo(store, "owner/partial", None)  # no weights: not listed
    shutil.copytree(tiny_checkpoint, models / "local")
    (tmp_path / "p.ini").write_text("[owner/tiny]\nctx-size = 512\n")
    argv = ["--model-store-root", str(store), "--models-dir", str(models), "--models-preset", str(tmp_path / "p.ini")]
    resolved = resolve_serving(argv, {})
    assert sorted(resolved.models) == ["local", "owner/tiny"]
    tiny = resolved.models["owner/tiny"]
    assert tiny.source == "preset" and tiny.config.ctx_size == 512  # the preset section merges over the store
    assert Path(tiny.config.model).parent.name == "snapshots" and tiny.provenance["model"] == "store"


def test_a_model_argument_lists_no_store(tmp_path: Path, tiny_checkpoint: Path) -> None:
    cache_repo(tmp_path / "store", "owner/tiny", tiny_checkpoint)
    resolved = resolve_serving(["-m", str(tiny_checkpoint), "--model-store-root", str(tmp_path / "store")], {})
    assert not resolved.is_router and resolved.models == {}


def test_dedup_cache_models_hides_the_store_entry_a_preset_serves(tmp_path: Path, tiny_checkpoint: Path) -> None:
    from mlxd.daemon.loading import load_router_model
    from mlxd.daemon.router import ModelPool

    cache_repo(tmp_path / "store", "owner/tiny", tiny_checkpoint)
    cache_repo(tmp_path / "store", "owner/other", tiny_checkpoint)
    (tmp_path / "p.ini").write_text("[mine]\nhf-repo = owner/tiny\ndedup-cache-models = true\n")
    resolved = resolve_serving(["--model-store-root", str(tmp_path / "store"),
                                "--models-preset", str(tmp_path / "p.ini")], {})
    assert sorted(resolved.models) == ["mine", "owner/other", "owner/tiny"]
    assert sorted(e.name for e in ModelPool(resolved, load_router_model).entries()) == ["mine", "owner/other"]


def test_config_explain_and_dump_list_the_store_models_the_router_serves(tmp_path: Path,
                                                                         tiny_checkpoint: Path) -> None:
    cache_repo(tmp_path / "store", "owner/tiny", tiny_checkpoint)
    mlxd = str(Path(sys.executable).parent / "mlxd")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MLXD_"))}
    env["XDG_CONFIG_HOME"] = str(tmp_path)
    router = ["--", "--model-store-root", str(tmp_path / "store")]

    def run(*args: str) -> str:
        done = subprocess.run([mlxd, "config", *args, *router], capture_output=True, text=True, env=env, timeout=60,
                              check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    explained = json.loads(run("explain", "--format", "json"))
    assert list(explained["models"]) == ["owner/tiny"]
    assert explained["models"]["owner/tiny"]["model"]["source"] == "store"
    assert '[models."owner/tiny"]' in run("dump")
