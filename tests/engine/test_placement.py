"""-ngl and -dev against the checkpoint's layer count and MLX's device (issue 28, item 11): a count at or above the
layer count is full offload, 0 and `-dev none` are CPU-only where MLX runs on the CPU, a partial count is refused
before any weight is read. The daemon side: tests/e2e/test_placement_daemon.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxd.engine.loading import placement
from mlxd.errors import EngineError


@pytest.fixture
def two_layers(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    return tmp_path


@pytest.mark.parametrize("on_gpu", [False, True], ids=["cpu", "gpu"])
@pytest.mark.parametrize("ngl", ["auto", "all", "-1", "2", "33", "99"])
def test_full_offload_is_accepted_on_either_device(two_layers: Path, ngl: str, on_gpu: bool) -> None:
    where = placement.check(two_layers, ngl, None, on_gpu=on_gpu)
    assert where.startswith("every layer on the " + ("GPU" if on_gpu else "CPU"))


def test_partial_offload_is_refused_with_the_layer_count(two_layers: Path) -> None:
    with pytest.raises(EngineError, match=r"n-gpu-layers=1: .*partial GPU offload \(1 of 2 layers\).*-ngl 2 or more"):
        placement.check(two_layers, "1", None, on_gpu=True)


@pytest.mark.parametrize("ngl,device", [("0", None), ("auto", "none"), ("0", "none"), ("99", "NONE")])
def test_cpu_only_is_accepted_where_mlx_runs_on_the_cpu_and_refused_on_a_gpu(two_layers: Path, ngl: str,
                                                                            device: str | None) -> None:
    assert placement.check(two_layers, ngl, device, on_gpu=False).startswith("CPU only")
    with pytest.raises(EngineError, match="CPU-only asked of a GPU backend"):
        placement.check(two_layers, ngl, device, on_gpu=True)


def test_the_layer_count_of_a_multimodal_checkpoint_is_its_text_model(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 4}}))
    assert placement.layer_count(tmp_path) == 4
    with pytest.raises(EngineError, match=r"\(3 of 4 layers\)"):
        placement.check(tmp_path, "3", None, on_gpu=False)
