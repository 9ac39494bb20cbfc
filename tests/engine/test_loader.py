"""Resolving -m / --hf-repo and loading checkpoints: local directories, a hub cache, refusals, clear errors."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from mlxd.engine.loading import hub
from mlxd.engine.loading.loader import load_model, resolve_and_load, resolve_model_source
from mlxd.errors import EngineError

REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def _no_hub_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _cache_repo(store: Path, repo_id: str, checkpoint: Path) -> Path:
    """Lay ``checkpoint`` out as huggingface_hub caches a download of ``repo_id``."""
    repo_dir = store / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / REVISION
    shutil.copytree(checkpoint, snapshot)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(REVISION)
    return snapshot


def test_loads_a_local_checkpoint(tiny_checkpoint: Path) -> None:
    path = resolve_model_source(str(tiny_checkpoint), None)
    loaded = load_model(path)

    assert path == tiny_checkpoint
    assert loaded.name == tiny_checkpoint.name
    assert loaded.vocab_size == 2048 and loaded.n_ctx_train == 8192
    assert loaded.n_params == 360_832 and loaded.size_bytes == 4 * loaded.n_params
    assert set(loaded.eos_token_ids) == set(loaded.tokenizer.eos_token_ids) and len(loaded.eos_token_ids) == 2
    assert loaded.generation_config["top_k"] == 20
    assert loaded.config["model_type"] == "qwen3"


def test_repo_id_resolves_from_the_cache(tmp_path: Path, tiny_checkpoint: Path) -> None:
    snapshot = _cache_repo(tmp_path, "acme/tiny-mlx", tiny_checkpoint)

    loaded = resolve_and_load("acme/tiny-mlx", None, offline=True, store_root=tmp_path)

    assert loaded.path == snapshot
    assert loaded.name == "acme/tiny-mlx"


def test_bare_name_means_mlx_community(tmp_path: Path, tiny_checkpoint: Path) -> None:
    snapshot = _cache_repo(tmp_path, "mlx-community/tiny-mlx", tiny_checkpoint)

    assert resolve_model_source("tiny-mlx", None, store_root=tmp_path) == snapshot


def test_hf_repo_wins_over_model(tmp_path: Path, tiny_checkpoint: Path) -> None:
    snapshot = _cache_repo(tmp_path, "acme/tiny-mlx", tiny_checkpoint)

    assert resolve_model_source(str(tiny_checkpoint), "acme/tiny-mlx", store_root=tmp_path) == snapshot


def test_missing_repo_offline_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EngineError, match=r"acme/absent: not in the local cache under .*--offline forbids"):
        resolve_model_source("acme/absent", None, offline=True, store_root=tmp_path)

    with pytest.raises(EngineError, match="HF_HUB_OFFLINE forbids downloading"):
        resolve_model_source(None, "acme/absent", store_root=tmp_path)


def test_incomplete_snapshot_is_not_used_offline(tmp_path: Path, tiny_checkpoint: Path) -> None:
    snapshot = _cache_repo(tmp_path, "acme/tiny-mlx", tiny_checkpoint)
    (snapshot / "model.safetensors").unlink()

    with pytest.raises(EngineError, match="not in the local cache"):
        resolve_model_source("acme/tiny-mlx", None, offline=True, store_root=tmp_path)


def test_download_when_not_cached(
    tmp_path: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import huggingface_hub

    calls: list[dict[str, object]] = []

    def fake_snapshot_download(repo_id: str, **kwargs: object) -> str:
        calls.append({"repo_id": repo_id, **kwargs})
        return str(_cache_repo(tmp_path, repo_id, tiny_checkpoint))

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    with caplog.at_level(logging.DEBUG, logger="mlxd"):
        path = resolve_model_source("acme/tiny-mlx", None, hf_token="hf_secret_value", store_root=tmp_path)

    assert path.parents[1].name == "models--acme--tiny-mlx"
    assert calls[0]["repo_id"] == "acme/tiny-mlx" and calls[0]["token"] == "hf_secret_value"
    assert calls[0]["cache_dir"] == tmp_path and "model*.safetensors" in calls[0]["allow_patterns"]  # type: ignore[operator]
    assert "downloading" in caplog.text and "hf_secret_value" not in caplog.text


@pytest.mark.parametrize("name", ["model.gguf", "Model-Q4_K_M.GGUF"])
def test_gguf_file_is_refused_unread(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"not even a gguf header")

    with pytest.raises(EngineError, match="GGUF is llama.cpp's format"):
        resolve_model_source(str(path), None)
    with pytest.raises(EngineError, match="GGUF"):
        resolve_model_source(str(tmp_path / "absent.gguf"), None)


def test_gguf_only_directory_and_repos_are_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model-q8_0.gguf").write_bytes(b"")

    with pytest.raises(EngineError, match="GGUF"):
        resolve_model_source(str(tmp_path), None)
    with pytest.raises(EngineError, match="GGUF"):
        resolve_model_source(None, "ggml-org/gemma-3-1b-it-GGUF")
    with pytest.raises(EngineError, match=":QUANT tag selects a GGUF file"):
        resolve_model_source(None, "ggml-org/gemma-3-1b-it:Q4_K_M")


def test_load_failures_name_the_path_and_cause(tmp_path: Path, tiny_checkpoint: Path) -> None:
    with pytest.raises(EngineError, match=r"no such file or directory"):
        resolve_model_source(str(tmp_path / "nowhere"), None)
    with pytest.raises(EngineError, match=r"no config.json; not an MLX checkpoint"):
        load_model(tmp_path)

    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    (broken / "config.json").write_text('{"model_type": "qwen3"')
    with pytest.raises(EngineError, match=rf"model {broken}: malformed JSON"):
        load_model(broken)

    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    with pytest.raises(EngineError, match=rf"model {broken}: cannot load: .*no-such-architecture not supported"):
        load_model(broken)


def test_repo_of_snapshot_reads_the_cache_layout(tmp_path: Path) -> None:
    path = tmp_path / "models--acme--tiny--v2" / "snapshots" / REVISION

    assert hub.repo_of_snapshot(path) == "acme/tiny--v2"
    assert hub.repo_of_snapshot(tmp_path) is None
