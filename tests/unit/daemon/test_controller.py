"""The one writer (mlxd.daemon.controller.Controller) with a fake loader: one test per path (start, PATCH, PUT,
reload, LoRA scales, sleep and wake) and per effect (live, reload, restart, refused), each checking what was loaded,
what is served, the generation and the recorded error."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from mlxd.admin.routes.config import patch_values
from mlxd.api.state import ServingState
from mlxd.engine import ServedModel
from mlxd.config import ResolvedConfig
from mlxd.daemon.controller import Controller
from mlxd.daemon.discovery import resolve_serving
from mlxd.daemon.notify import Notifier
from mlxd.daemon.serve import log_settings
from mlxd.engine.sampling import SamplingParams
from mlxd.engine.sampling.defaults import sampling_defaults
from mlxd.engine.spec import ModelSpec
from mlxd.errors import AdminError, EngineError


@dataclass
class FakeWorker:
    spec: ModelSpec
    stopped: bool = False
    n_in_flight: int = 0

    def stop(self, drain_timeout: float = 0.0, spill_timeout: float | None = None) -> None:
        self.stopped = True


@dataclass
class FakeLoader:
    """Builds what the real loader would from the configuration (its ModelSpec), without weights."""

    loads: list[ModelSpec] = field(default_factory=list)
    fail: bool = False

    def __call__(self, resolved: ResolvedConfig) -> ServedModel:
        if self.fail:
            raise EngineError("the checkpoint cannot be read")
        spec = ModelSpec.of(resolved.config, {n for n in resolved.provenance if resolved.explicit(n)})
        self.loads.append(spec)
        return ServedModel(name=spec.name or "m", aliases=list(spec.aliases), loaded=cast(Any, None),
                           worker=cast(Any, FakeWorker(spec)), chat_template=None, sampling_defaults=spec.sampling)


def make(tmp_path: Path, *argv: str) -> tuple[Controller, FakeLoader]:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    args = ["-m", str(model), *argv]
    resolved = resolve_serving(args, {})
    loader = FakeLoader()
    controller = Controller(argv=args, env={}, resolved=resolved, serving=ServingState(config=resolved.config),
                            notifier=Notifier({}), load_model=loader, log_settings=log_settings)
    return controller, loader


def worker(controller: Controller) -> FakeWorker:
    assert controller.serving.model is not None
    return cast(FakeWorker, controller.serving.model.worker)


async def settle(controller: Controller) -> None:
    await controller.close()  # waits for replaced models to drain


def test_start_loads_once_and_commits_the_first_generation(tmp_path: Path) -> None:
    async def run() -> None:
        controller, loader = make(tmp_path, "-c", "256")
        await controller.start()
        assert len(loader.loads) == 1 and controller.generation == 1
        assert worker(controller).spec.worker.ctx_size == 256

    asyncio.run(run())


def test_a_live_option_applies_without_a_reload(tmp_path: Path) -> None:
    async def run() -> None:
        controller, loader = make(tmp_path)
        await controller.start()
        result = await controller.patch({"temperature": 0.25})
        assert result.applied and result.changed == ("temperature",) and controller.generation == 2
        assert len(loader.loads) == 1
        assert controller.serving.model is not None and controller.serving.model.sampling_defaults.temperature == 0.25

    asyncio.run(run())


@pytest.mark.parametrize("option, value, read", [
    ("spec-draft-n-max", 8, lambda s: s.worker.spec_draft_n_max),
    ("spec-ngram-mod-n-min", 7, lambda s: s.worker.spec_ngram_mod_n_min),
    ("lookup-cache-static", "/tmp/cache.bin", lambda s: s.worker.lookup_cache_static),
    ("mmproj-auto", False, lambda s: s.media),
    ("model-draft", "/tmp/draft", lambda s: s.draft and s.draft.model),
    ("ctx-size", 512, lambda s: s.worker.ctx_size),
])
def test_an_option_read_at_load_reloads_the_model(tmp_path: Path, option: str, value: Any, read: Any) -> None:
    async def run() -> None:
        controller, loader = make(tmp_path)
        await controller.start()
        old = worker(controller)
        result = await controller.patch({option: value})
        assert result.applied and result.changed == (option,)
        assert len(loader.loads) == 2 and read(loader.loads[-1]) == value
        assert worker(controller) is not old
        await settle(controller)
        assert old.stopped

    asyncio.run(run())


def test_a_restart_option_is_pending_and_the_rest_applies(tmp_path: Path) -> None:
    async def run() -> None:
        controller, loader = make(tmp_path)
        await controller.start()
        result = await controller.patch({"port": 9999, "top-k": 5})
        assert result.applied and result.pending_restart == ("port",)
        assert controller.pending_restart == ("port",) and len(loader.loads) == 1
        assert controller.serving.model is not None and controller.serving.model.sampling_defaults.top_k == 5

    asyncio.run(run())


def test_unset_removes_an_override(tmp_path: Path) -> None:
    """UNSET is what an admin PATCH's null becomes (mlxd.admin.routes.config.patch_values)."""
    async def run() -> None:
        controller, _ = make(tmp_path, "--temp", "0.5")
        await controller.start()
        await controller.patch({"temperature": 0.1})
        assert controller.overrides == {"temperature": 0.1}
        result = await controller.patch(patch_values({"temperature": None}))
        assert result.applied and controller.overrides == {}
        assert controller.resolved.config.temperature == 0.5
        assert controller.resolved.provenance["temperature"] == "cli:--temp"

    asyncio.run(run())


def test_a_refused_change_leaves_everything_as_it_was(tmp_path: Path) -> None:
    async def run() -> None:
        controller, loader = make(tmp_path)
        await controller.start()
        before = (controller.generation, controller.resolved.config_hash, controller.serving.model)
        result = await controller.patch({"top-k": "many"})
        assert not result.applied and result.error and "top-k" in result.error
        assert controller.last_error is not None and controller.last_result == "refused"
        loader.fail = True
        failed = await controller.patch({"ctx-size": 1024})  # a reload whose load fails
        assert not failed.applied and "cannot be read" in (failed.error or "")
        assert (controller.generation, controller.resolved.config_hash, controller.serving.model) == before
        assert not worker(controller).stopped

    asyncio.run(run())


def test_put_replaces_the_admin_layer(tmp_path: Path) -> None:
    async def run() -> None:
        controller, _ = make(tmp_path)
        await controller.start()
        await controller.patch({"temperature": 0.1, "top-k": 3})
        result = await controller.replace_overrides({"top-k": 4})
        assert result.applied and controller.overrides == {"top-k": 4}
        assert controller.resolved.config.temperature == SamplingParams().temperature

    asyncio.run(run())


def test_sleep_frees_the_model_and_wake_loads_it_again(tmp_path: Path) -> None:
    async def run() -> None:
        controller, loader = make(tmp_path)
        await controller.start()
        old = worker(controller)
        name = controller.serving.model.name if controller.serving.model else None
        assert await controller.sleep(lambda model: True) == name
        assert controller.serving.sleeping and controller.serving.model is None and old.stopped
        assert controller.generation == 2
        await controller.wake("m")
        assert not controller.serving.sleeping and len(loader.loads) == 2 and controller.generation == 3
        assert controller.serving.model is not None
        assert controller.serving.model.sampling_defaults == sampling_defaults(controller.resolved.config)

    asyncio.run(run())


def test_a_reread_applies_the_files_and_refuses_one_that_loses_the_model(tmp_path: Path) -> None:
    async def run() -> None:
        toml = tmp_path / "mlxd.toml"
        (tmp_path / "model").mkdir()
        toml.write_text(f'model = "{tmp_path / "model"}"\ntemperature = 0.5\n')
        args = ["--config", str(toml)]
        resolved = resolve_serving(args, {})
        loader = FakeLoader()
        controller = Controller(argv=args, env={}, resolved=resolved, serving=ServingState(config=resolved.config),
                                notifier=Notifier({}), load_model=loader, log_settings=log_settings)
        await controller.start()
        toml.write_text(f'model = "{tmp_path / "model"}"\ntemperature = 0.25\n')
        result = await controller.reload("file")
        assert result.applied and result.changed == ("temperature",) and len(loader.loads) == 1
        toml.write_text("temperature = 0.3\n")  # a write that lost the model line
        refused = await controller.reload("file")
        assert not refused.applied and refused.error and controller.resolved.config.temperature == 0.25

    asyncio.run(run())


def test_if_match_is_checked_under_the_lock_for_every_action(tmp_path: Path) -> None:
    async def run() -> None:
        controller, _ = make(tmp_path)
        await controller.start()
        stale = controller.etag
        await controller.patch({"top-k": 3})
        for attempt in (controller.patch({"top-k": 4}, if_match=stale),
                        controller.replace_overrides({}, if_match=stale),
                        controller.set_lora_scales({}, trigger="t", if_match=stale)):
            with pytest.raises(AdminError) as refused:
                await attempt
            assert refused.value.status == 412
        assert controller.resolved.config.top_k == 3

    asyncio.run(run())


def test_lora_scales_without_a_model_are_refused(tmp_path: Path) -> None:
    async def run() -> None:
        controller, _ = make(tmp_path)
        await controller.start()
        assert await controller.sleep(lambda model: True) is not None
        result = await controller.set_lora_scales({0: 0.5}, trigger="t")
        assert not result.applied and "no model is loaded" in (result.error or "")

    asyncio.run(run())
