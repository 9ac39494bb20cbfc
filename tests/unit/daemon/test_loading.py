"""The router's model pool over real tiny checkpoints: shared loads, LRU eviction, draining, failed loads,
configuration changes, load-on-startup and idle unload."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from mlxd.config import ModelResolved, ResolvedConfig, resolve
from mlxd.daemon.loading import load_router_model
from mlxd.daemon.pool_change import PoolChange, PoolStep
from mlxd.daemon.router import ModelPool
from mlxd.errors import EngineError, InvalidRequest, MlxdError


class CountingLoader:
    """The real loader, counting how often each model is loaded."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def __call__(self, model: ModelResolved) -> Any:
        self.calls[model.name] = self.calls.get(model.name, 0) + 1
        return load_router_model(model)


def configure(root: Path, checkpoint: Path, *, presets: str = "", models_max: int = 2,
              names: tuple[str, ...] = ("alpha", "beta", "gamma")) -> ResolvedConfig:
    models = root / "models"
    models.mkdir(exist_ok=True)
    for name in names:
        if not (models / name).exists():
            shutil.copytree(checkpoint, models / name)
    argv = ["--models-dir", str(models), "--models-max", str(models_max)]
    if presets:
        (root / "presets.ini").write_text(presets)
        argv += ["--models-preset", str(root / "presets.ini")]
    return resolve(argv, {}, read_config_ini=False)


class Owner:
    """The pool's owner reduced to its discipline (one change at a time, under a lock) and a record of the steps
    it would commit; the daemon's is mlxd.daemon.controller.Controller."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.steps: list[PoolStep] = []

    async def pool_change(self, pool: ModelPool, change: PoolChange) -> None:
        async with self.lock:
            try:
                await pool.execute(change)
            finally:
                self.steps += pool.take_steps()

    def model_state(self, name: str, state: str, error: str | None = None) -> None:
        pass


def run(body: Callable[[ModelPool], Awaitable[None]], resolved: ResolvedConfig,
        loader: Callable[[ModelResolved], Any] = load_router_model) -> None:
    async def main() -> None:
        pool = ModelPool(resolved, loader, owner=Owner())
        try:
            await body(pool)
        finally:
            await pool.close(0.0)

    asyncio.run(main())


def states(pool: ModelPool) -> dict[str, str]:
    return {e.name: e.state for e in pool.entries()}


def test_concurrent_requests_share_one_load_and_the_least_recently_used_is_evicted(
        tmp_path: Path, tiny_checkpoint: Path) -> None:
    loader = CountingLoader()

    async def body(pool: ModelPool) -> None:
        first, second = await asyncio.gather(pool.acquire("alpha", None, touch=True),
                                             pool.acquire("alpha", None, touch=True))
        assert first is second and loader.calls == {"alpha": 1}
        pool.release(first)
        pool.release(second)
        pool.release(await pool.acquire("beta", None, touch=True))
        pool.release(await pool.acquire("alpha", None, touch=True))  # alpha is now the most recently used
        pool.release(await pool.acquire("beta", None, touch=False))  # a GET does not refresh last use
        pool.release(await pool.acquire("gamma", None, touch=True))
        assert states(pool) == {"alpha": "loaded", "beta": "unloaded", "gamma": "loaded"}
        # Each on-demand load and the eviction reached the owner as a step of its own to commit.
        assert isinstance(pool.owner, Owner)
        assert [(s.name, s.state) for s in pool.owner.steps] == [
            ("alpha", "loaded"), ("beta", "loaded"), ("beta", "unloaded"), ("gamma", "loaded")]
        assert pool.owner.steps[2].trigger == "router:evict (room for gamma)"

    run(body, configure(tmp_path, tiny_checkpoint), loader)


def test_refusals_name_the_problem_in_b10621_words(tmp_path: Path, tiny_checkpoint: Path) -> None:
    async def body(pool: ModelPool) -> None:
        for name, autoload, message in ((None, None, "model name is missing from the request"),
                                        ("nope", None, "model 'nope' not found"),
                                        ("alpha", False, "model is not loaded")):
            with pytest.raises(InvalidRequest, match=message):
                await pool.acquire(name, autoload, touch=True)
        with pytest.raises(InvalidRequest, match="model is not running"):
            await pool.unload("alpha")
        await pool.load("alpha", wait=True)
        with pytest.raises(InvalidRequest, match="model is already running"):
            await pool.load("alpha")
        assert states(pool)["alpha"] == "loaded"

    run(body, configure(tmp_path, tiny_checkpoint))


def test_a_failed_load_is_recorded_and_touches_no_other_model(tmp_path: Path, tiny_checkpoint: Path) -> None:
    broken = tmp_path / "models" / "broken"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{not json")
    loader = CountingLoader()

    async def body(pool: ModelPool) -> None:
        alpha = await pool.acquire("alpha", None, touch=True)
        pool.release(alpha)
        with pytest.raises(EngineError, match="model name=broken failed to load"):
            await pool.acquire("broken", None, touch=True)
        entry = next(e for e in pool.entries() if e.name == "broken")
        assert entry.state == "failed" and entry.error
        assert states(pool)["alpha"] == "loaded" and next(e for e in pool.entries() if e.name == "alpha").served \
            is alpha
        with pytest.raises(EngineError):  # a later request tries again
            await pool.acquire("broken", None, touch=True)
        assert loader.calls["broken"] == 2

    run(body, configure(tmp_path, tiny_checkpoint, names=("alpha",)), loader)


def test_an_on_demand_load_waits_for_the_held_model_then_evicts_it(tmp_path: Path, tiny_checkpoint: Path) -> None:
    """Issue 28: a request's load evicts only an idle model; while the only model is held, it waits for room
    (the held model keeps serving, nothing drains), and evicts it once it is let go."""
    async def body(pool: ModelPool) -> None:
        alpha = await pool.acquire("alpha", None, touch=True)
        loading = asyncio.get_running_loop().create_task(pool.acquire("beta", None, touch=True))
        await asyncio.sleep(0.3)
        assert not loading.done() and states(pool) == {"alpha": "loaded", "beta": "unloaded"}
        pool.release(alpha)
        pool.release(await loading)
        assert states(pool) == {"alpha": "unloaded", "beta": "loaded"}

    run(body, configure(tmp_path, tiny_checkpoint, models_max=1, names=("alpha", "beta")))


def test_a_configuration_change_unloads_only_models_whose_definition_changed(
        tmp_path: Path, tiny_checkpoint: Path) -> None:
    before = configure(tmp_path, tiny_checkpoint, presets="[alpha]\nctx-size = 512\n[beta]\nctx-size = 512\n")
    after = configure(tmp_path, tiny_checkpoint, presets="[alpha]\nctx-size = 512\n[beta]\nctx-size = 1024\n",
                      names=("alpha", "beta", "gamma", "delta"))

    async def body(pool: ModelPool) -> None:
        alpha = await pool.acquire("alpha", None, touch=True)
        pool.release(alpha)
        pool.release(await pool.acquire("beta", None, touch=True))
        await pool.apply(after)
        assert states(pool) == {"alpha": "loaded", "beta": "unloaded", "gamma": "unloaded", "delta": "unloaded"}
        assert next(e for e in pool.entries() if e.name == "alpha").served is alpha
        assert next(e for e in pool.entries() if e.name == "beta").spec.config.ctx_size == 1024

    run(body, before)


def test_load_on_startup_and_idle_unload(tmp_path: Path, tiny_checkpoint: Path) -> None:
    presets = "[alpha]\nload-on-startup = true\nsleep-idle-seconds = 1\n[beta]\nload-on-startup = true\n"

    async def body(pool: ModelPool) -> None:
        await pool.start()
        assert states(pool) == {"alpha": "loaded", "beta": "loaded", "gamma": "unloaded"}
        # The controller runs start() under its lock and commits it as the startup generation.
        assert [(s.trigger, s.name) for s in pool.take_steps()] == [("startup", "alpha"), ("startup", "beta")]
        deadline = time.monotonic() + 30
        while states(pool)["alpha"] != "unloaded" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert states(pool) == {"alpha": "unloaded", "beta": "loaded", "gamma": "unloaded"}
        assert isinstance(pool.owner, Owner)
        assert [(s.trigger, s.name, s.state) for s in pool.owner.steps] == [("router:idle", "alpha", "unloaded")]

    run(body, configure(tmp_path, tiny_checkpoint, presets=presets))


def test_more_load_on_startup_models_than_models_max_is_an_error(tmp_path: Path, tiny_checkpoint: Path) -> None:
    presets = "[alpha]\nload-on-startup = true\n[beta]\nload-on-startup = true\n"

    async def body(pool: ModelPool) -> None:
        with pytest.raises(MlxdError, match="more than --models-max 1"):
            await pool.start()
        assert set(states(pool).values()) == {"unloaded"}

    run(body, configure(tmp_path, tiny_checkpoint, presets=presets, models_max=1, names=("alpha", "beta")))


def test_a_load_in_progress_holds_no_lock_and_a_reload_under_the_lock_settles_it(
        tmp_path: Path, tiny_checkpoint: Path) -> None:
    # alpha's weights are read behind a gate; meanwhile the owner's lock is free, another model loads and serves,
    # and a reload holding the lock (alpha's definition changed) waits for the read alone, not for the lock it
    # holds; the request waiting for alpha then gets the new definition.
    before = configure(tmp_path, tiny_checkpoint, presets="[alpha]\nctx-size = 512\n")
    after = configure(tmp_path, tiny_checkpoint, presets="[alpha]\nctx-size = 1024\n")
    gate = threading.Event()
    loader = CountingLoader()

    def gated(model: ModelResolved) -> Any:
        if model.name == "alpha" and not gate.is_set():
            gate.wait(60)
        return loader(model)

    async def body(pool: ModelPool) -> None:
        owner = pool.owner
        assert isinstance(owner, Owner)
        waiting = asyncio.get_running_loop().create_task(pool.acquire("alpha", None, touch=True))
        while states(pool)["alpha"] != "loading":
            await asyncio.sleep(0.01)
        assert not owner.lock.locked()
        pool.release(await asyncio.wait_for(pool.acquire("beta", None, touch=True), 60))
        assert states(pool)["alpha"] == "loading" and not waiting.done()

        async def reload() -> None:
            async with owner.lock:
                await pool.apply(after)

        reloading = asyncio.get_running_loop().create_task(reload())
        await asyncio.sleep(0.1)
        assert not reloading.done()  # it waits for alpha's read to finish
        gate.set()
        await asyncio.wait_for(reloading, 60)
        served = await asyncio.wait_for(waiting, 60)
        pool.release(served)
        assert served.config is not None and served.config.ctx_size == 1024
        assert loader.calls == {"alpha": 2, "beta": 1}  # the old definition's load, then the new one's

    run(body, before, gated)
