"""Runtime LoRA on the tiny checkpoint: parity with mlx-lm's fused adapters, scale snapshots, the prompt cache."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_unflatten

from mlxd.config import resolve
from mlxd.engine.loading.loader import LoadedModel, load_model
from mlxd.engine.loading.lora import AdapterSpec, LoraSet, adapter_specs, attach_adapters
from mlxd.engine.loading.lora_layers import MultiLoRALinear
from mlxd.engine.settings import WorkerSettings
from mlxd.dev.synth_lora import make_adapter
from mlxd.engine.types import FinalEvent, TokenEvent
from mlxd.engine.batching.worker import ModelWorker
from mlxd.errors import ConfigError, EngineError, InvalidRequest
from tests.engine.conftest import PROMPTS, final, greedy_request


@pytest.fixture(scope="module")
def adapters(tiny_model: LoadedModel, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two random adapters for the tiny checkpoint (different seeds, q and v projections)."""
    root = tmp_path_factory.mktemp("adapters")
    return [make_adapter(tiny_model.model, root / f"a{seed}", seed=seed) for seed in (1, 2)]


@pytest.fixture
def adapted(tiny_checkpoint: Path, adapters: list[Path]) -> Callable[..., tuple[LoadedModel, LoraSet]]:
    """A private copy of the tiny model with the given adapter scales attached."""

    def make(*scales: float) -> tuple[LoadedModel, LoraSet]:
        loaded = load_model(tiny_checkpoint)
        specs = [AdapterSpec(str(path), s) for path, s in zip(adapters, scales)]
        return loaded, attach_adapters(loaded.model, specs)

    return make


@pytest.fixture
def lora_worker(adapted: Callable[..., tuple[LoadedModel, LoraSet]]) -> Iterator[Callable[..., ModelWorker]]:
    workers: list[ModelWorker] = []

    def make(*scales: float, **settings: Any) -> ModelWorker:
        loaded, lora = adapted(*scales)
        settings.setdefault("ctx_size", 2048)
        worker = ModelWorker(loaded, WorkerSettings(**settings), lora=lora)
        worker.start()
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.stop(0.0)


def fused(checkpoint: Path, adapters: list[tuple[Path, float]]) -> Any:
    """mlx-lm's reference: each adapter loaded with ``mlx_lm.tuner.utils.load_adapters``, scaled, and fused."""
    from mlx_lm.tuner.lora import LoRALinear
    from mlx_lm.tuner.utils import load_adapters

    model = load_model(checkpoint).model
    for path, scale in adapters:
        load_adapters(model, str(path))
        layers = [(name, m) for name, m in model.named_modules() if isinstance(m, LoRALinear)]
        for _, m in layers:
            m.scale *= scale
        model.update_modules(tree_unflatten([(name, m.fuse()) for name, m in layers]))
    return model


def logits(model: Any, tokens: list[int]) -> mx.array:
    return model(mx.array(tokens)[None])


def tokens_of(tiny_model: LoadedModel, text: str) -> list[int]:
    return list(tiny_model.tokenizer.encode(text))


def test_scale_zero_is_the_base_model_exactly(tiny_model, adapted) -> None:
    loaded, lora = adapted(0.0, 0.0)
    prompt = tokens_of(tiny_model, PROMPTS[0])
    assert mx.array_equal(logits(loaded.model, prompt), logits(tiny_model.model, prompt)).item()
    assert sum(isinstance(m, MultiLoRALinear) for _, m in loaded.model.named_modules()) == 4  # q, v x 2 layers


@pytest.mark.parametrize("scale", [0.5, 1.0, -0.75])
def test_unfused_equals_mlx_lm_fused_at_the_same_scale(tiny_model, tiny_checkpoint, adapters, adapted, scale) -> None:
    loaded, _ = adapted(scale)
    prompt = tokens_of(tiny_model, PROMPTS[1])
    reference = fused(tiny_checkpoint, [(adapters[0], scale)])
    got, want = logits(loaded.model, prompt), logits(reference, prompt)
    assert mx.allclose(got, want, atol=1e-4, rtol=1e-4).item()
    assert not mx.allclose(got, logits(tiny_model.model, prompt), atol=1e-2).item()  # the adapter does something


def test_two_adapters_add(tiny_model, tiny_checkpoint, adapters, adapted) -> None:
    loaded, lora = adapted(0.5, 0.25)
    prompt = tokens_of(tiny_model, PROMPTS[2])
    reference = fused(tiny_checkpoint, [(adapters[0], 0.5), (adapters[1], 0.25)])
    assert mx.allclose(logits(loaded.model, prompt), logits(reference, prompt), atol=1e-4, rtol=1e-4).item()
    # The same layers, switched at run time to one adapter alone, equal that adapter fused alone.
    lora.apply((0.0, 0.25))
    alone = fused(tiny_checkpoint, [(adapters[1], 0.25)])
    assert mx.allclose(logits(loaded.model, prompt), logits(alone, prompt), atol=1e-4, rtol=1e-4).item()


def test_server_wide_scales_follow_b10621s_rule(adapted) -> None:
    _, lora = adapted(1.0, 0.5)
    assert [e["scale"] for e in lora.entries()] == [1.0, 0.5]
    lora.set_scales({1: 2.0})  # unlisted adapters go to 0
    assert lora.entries() == [{"id": 0, "path": lora.adapters[0].path, "scale": 0.0},
                           {"id": 1, "path": lora.adapters[1].path, "scale": 2.0}]
    with pytest.raises(InvalidRequest, match="invalid adapter id 2"):
        lora.set_scales({2: 1.0})
    with pytest.raises(InvalidRequest, match="finite"):
        lora.set_scales({0: float("nan")})
    # A request's own list: unlisted adapters 0, unknown ids ignored; none (or an empty list) = server-wide.
    assert lora.snapshot({0: 0.3, 7: 1.0}) == (0.3, 0.0)
    assert lora.snapshot(None) == lora.snapshot({}) == (0.0, 2.0)
    assert LoraSet.namespace((0.0, 2.0)) == "|lora=1:2.0" and LoraSet.namespace((0.0, 0.0)) == ""


def test_a_scale_change_alters_the_next_request_never_one_in_flight(tiny_model, lora_worker) -> None:
    prompt = tokens_of(tiny_model, PROMPTS[3])
    solo = lora_worker(0.0, 0.0, parallel=1, cache_ram=0)
    at_zero = final(solo.submit(greedy_request(prompt, 24))).tokens
    solo.set_lora_scales({0: 0.5})
    at_half = final(solo.submit(greedy_request(prompt, 24))).tokens
    assert at_zero != at_half

    worker = lora_worker(0.0, 0.0, parallel=2, cache_ram=0)
    events = iter(worker.submit(greedy_request(prompt, 24)))
    assert isinstance(next(events), TokenEvent)  # running
    worker.set_lora_scales({0: 0.5})
    assert worker.lora_adapters()[0]["scale"] == 0.5
    after = worker.submit(greedy_request(prompt, 24))
    rest = list(events)
    assert isinstance(rest[-1], FinalEvent) and rest[-1].tokens == at_zero
    assert final(after).tokens == at_half


def test_per_request_scales_do_not_leak_and_batches_never_mix(tiny_model, lora_worker) -> None:
    prompts = [tokens_of(tiny_model, p) for p in PROMPTS]
    solo = lora_worker(0.0, 0.0, parallel=1, cache_ram=0)
    plan = [None, {0: 0.5}, None, {1: 0.5, 0: 0.25}]
    want = [final(solo.submit(greedy_request(p, 12, lora=s))).tokens for p, s in zip(prompts, plan)]
    base = [final(solo.submit(greedy_request(p, 12))).tokens for p in prompts]
    assert base[0] == want[0] and base[2] == want[2]  # nothing leaked from the per-request scales
    assert want[1] != base[1] and want[3] != base[3]

    worker = lora_worker(0.0, 0.0, parallel=4, cache_ram=0)
    handles = [worker.submit(greedy_request(p, 12, lora=s)) for p, s in zip(prompts, plan)]
    assert [final(h).tokens for h in handles] == want


def test_the_prompt_cache_never_crosses_lora_states(tiny_model, lora_worker) -> None:
    prompt = tokens_of(tiny_model, PROMPTS[0] * 3)
    cold = lora_worker(0.0, 0.0, parallel=1, cache_ram=0)
    cold_half = final(cold.submit(greedy_request(prompt, 8, lora={0: 0.5}))).tokens

    worker = lora_worker(0.0, 0.0, parallel=1)
    first = final(worker.submit(greedy_request(prompt, 8)))
    other = final(worker.submit(greedy_request(prompt, 8, lora={0: 0.5})))
    assert other.timings.cache_n == 0 and other.tokens == cold_half
    again = final(worker.submit(greedy_request(prompt, 8)))
    assert again.timings.cache_n == len(prompt) - 1 and again.tokens == first.tokens
    worker.set_lora_scales({0: 0.5})  # the same state reached server-wide shares the per-request entries
    shared = final(worker.submit(greedy_request(prompt, 8)))
    assert shared.timings.cache_n == len(prompt) - 1 and shared.tokens == cold_half


def test_adapter_specs_from_the_command_line() -> None:
    """The configuration parses FNAME:SCALE (the last colon splits) into typed pairs, once; bad ones never reach
    the engine."""
    cfg = resolve(["--lora", "a", "--lora", "b", "--lora-scaled", "c:0.5,/x:y/d:-1"], {}, read_config_ini=False).config
    assert cfg.lora_scaled == [("c", 0.5), ("/x:y/d", -1.0)]
    assert adapter_specs(cfg.lora, cfg.lora_scaled) == [
        AdapterSpec("a"), AdapterSpec("b"), AdapterSpec("c", 0.5), AdapterSpec("/x:y/d", -1.0)]
    assert [s.scale for s in adapter_specs(["a"], [("c", 0.5)], init_without_apply=True)] == [0.0, 0.0]
    for bad in ("c", "c:", ":1", "c:x", "c:nan"):
        with pytest.raises(ConfigError, match="FNAME:SCALE"):
            resolve(["--lora-scaled", bad], {}, read_config_ini=False)


def test_adapters_that_cannot_be_served_are_refused(tiny_checkpoint, adapters, tmp_path) -> None:
    model = load_model(tiny_checkpoint).model

    def variant(name: str, **config: Any) -> str:
        out = make_adapter(model, tmp_path / name, seed=3)
        data = json.loads((out / "adapter_config.json").read_text())
        for key, value in config.items():
            if key in ("rank", "alpha", "scale"):
                data["lora_parameters"][key] = value
                if key == "alpha":
                    del data["lora_parameters"]["scale"]
            else:
                data[key] = value
        (out / "adapter_config.json").write_text(json.dumps(data))
        return str(out)

    cases = {
        str(tmp_path / "x.gguf"): "GGUF",
        str(tmp_path / "missing"): "no such directory",
        variant("dora", fine_tune_type="dora"): "cannot be served unfused",
        variant("alpha", alpha=16): "not 'alpha'",
        variant("rank", rank=8): "rank 4 differs",
        variant("layers", num_layers=1): "not an adapter parameter",
        str(make_adapter(model, tmp_path / "nan", seed=3, poison=float("nan"))): "lora_b holds NaN or infinite",
        str(make_adapter(model, tmp_path / "inf", seed=3, poison=float("-inf"))): "lora_b holds NaN or infinite",
        variant("nan-scale", scale=float("nan")): "scale nan is not a finite number",
    }
    for path, message in cases.items():
        with pytest.raises(EngineError, match=message):
            attach_adapters(model, [AdapterSpec(path)])
    assert not any(isinstance(m, MultiLoRALinear) for _, m in model.named_modules())  # nothing half-applied


def test_quantized_bases_match_mlx_lms_lora_layer(tmp_path, adapters) -> None:
    from mlx_lm.tuner.utils import load_adapters

    from mlxd.dev import synth

    checkpoint = synth.make_checkpoint(tmp_path / "q8", quantize=8)
    ours = load_model(checkpoint)
    attach_adapters(ours.model, [AdapterSpec(str(adapters[0]), 1.0)])
    reference = load_model(checkpoint).model
    load_adapters(reference, str(adapters[0]))  # mlx-lm's own LoRALinear over the QuantizedLinear, unfused
    prompt = list(ours.tokenizer.encode(PROMPTS[0]))
    layer = next(m for _, m in ours.model.named_modules() if isinstance(m, MultiLoRALinear))
    assert isinstance(layer.linear, nn.QuantizedLinear)
    assert mx.allclose(logits(ours.model, prompt), logits(reference, prompt), atol=1e-5, rtol=1e-5).item()
