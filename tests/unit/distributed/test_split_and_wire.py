"""The pieces of a model across machines that need no group: layer ranges, the restricted wire format, the
options' refusals and the group as configuration."""

from __future__ import annotations

import os
import pickle

import pytest

from mlxd.config import ConfigError
from mlxd.engine.distributed import wire
from mlxd.engine.distributed.replicate import portable
from mlxd.engine.distributed.split import layer_ranges
from mlxd.engine.sampling.params import SamplingParams
from mlxd.engine.types import GenerationRequest
from mlxd.errors import EngineError
from tests.unit.config.conftest import resolve_in  # noqa: F401  (the fixture)


def test_layer_ranges_are_contiguous_and_follow_the_shares() -> None:
    assert layer_ranges(4, [1, 1]) == [(0, 2), (2, 4)]
    assert layer_ranges(3, [1, 1, 1]) == [(0, 1), (1, 2), (2, 3)]
    assert layer_ranges(12, [2, 1, 1]) == [(0, 6), (6, 9), (9, 12)]


def test_a_rank_without_a_layer_is_refused() -> None:
    with pytest.raises(EngineError, match="without a layer"):
        layer_ranges(2, [1, 1, 1])
    with pytest.raises(EngineError, match="tensor-split"):
        layer_ranges(4, [0, 0])


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("true",))


def test_a_request_crosses_the_wire_and_nothing_else_is_unpickled() -> None:
    request = GenerationRequest(prompt_tokens=[1, 2, 3], sampling=SamplingParams(temperature=0.5, seed=7),
                                n_predict=4, stop=["\n"])
    back = wire.loads(wire.dumps([("add", 1, portable(request))]))
    assert back[0][2].prompt_tokens == [1, 2, 3] and back[0][2].sampling.seed == 7
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        wire.loads(pickle.dumps(_Evil()))


class _EngineFunction:
    # A function of an allowed module is refused too: only its types may be rebuilt from a peer's bytes.
    def __reduce__(self) -> tuple[object, tuple[str]]:
        from mlxd.engine.distributed.rpc_server import read_token

        return (read_token, ("/etc/hostname",))


def test_a_payload_naming_a_function_of_the_engine_is_refused() -> None:
    with pytest.raises(pickle.UnpicklingError, match="refused: mlxd.engine.distributed.rpc_server.read_token"):
        wire.loads(pickle.dumps(_EngineFunction()))


@pytest.mark.parametrize("argv,option", [
    (["--tensor-split", "1,1"], "tensor-split"),  # one machine: nothing to share
    (["--rpc", "127.0.0.1:50052", "-sm", "row", "-ts", "3,1"], "tensor-split"),  # row splits evenly
    (["--rpc", "127.0.0.1:50052", "--cache-disk", "/tmp/x"], "cache-disk"),
    (["--rpc", "127.0.0.1:50052", "--lora", "a.safetensors"], "lora"),
    (["--rpc", "127.0.0.1:50052", "-sm", "tensor"], "split-mode"),
])
def test_what_a_group_cannot_honour_is_refused(resolve_in, argv: list[str], option: str) -> None:  # noqa: F811
    with pytest.raises(ConfigError) as info:
        resolve_in(["-m", "/models/x", *argv])
    assert option in {problem.option for problem in info.value.problems}


def test_a_group_is_configuration(resolve_in) -> None:  # noqa: F811
    from mlxd.engine.spec import DistributedSpec

    resolved = resolve_in(["-m", "/models/x", "--rpc", "10.0.0.2:50052,10.0.0.3:50052", "-ts", "2,1,1"],
                          env={"MLXD_RPC_BACKEND": "jaccl"})
    spec = DistributedSpec.of(resolved.config)
    assert spec is not None and spec.peers == ("10.0.0.2:50052", "10.0.0.3:50052")
    assert spec.split_mode == "layer" and spec.tensor_split == (2.0, 1.0, 1.0) and spec.backend == "jaccl"
    assert DistributedSpec.of(resolve_in(["-m", "/models/x", "--rpc", "10.0.0.2:1", "-sm", "none"]).config) is None


def test_admin_status_renders_each_member_of_the_group() -> None:
    import time

    from mlxd.admin.client import render_status

    peers = [{"model": "m", "address": "10.0.0.1:41231", "rank": 0, "shard": "layers 0..11", "state": "ready",
              "memory_bytes": 3 * 2**20, "last_heartbeat": time.time()},
             {"model": "m", "address": "10.0.0.2:50052", "rank": 1, "shard": "", "state": "missing",
              "memory_bytes": 0, "last_heartbeat": None}]
    text = render_status({"state": "serving", "generation": 1, "config_hash": "ab" * 32, "uptime": 3.0,
                          "pending_restart": [], "last_error": {"trigger": "distributed", "time": 0.0,
                                                                "message": "peer 10.0.0.2:50052 (rank 1) is missing"},
                          "models": [{"name": "m", "state": "loaded", "error": None}], "peers": peers})
    assert "distributed: peer 10.0.0.2:50052 (rank 1) is missing" in text
    assert "rank 0  10.0.0.1:41231" in text and "layers 0..11" in text and "3.0 MiB" in text
    assert "rank 1  10.0.0.2:50052" in text and "missing" in text and "heartbeat never" in text
