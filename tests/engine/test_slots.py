"""Slot choice as upstream makes it, and the per-slot context split."""

from __future__ import annotations

from mlxd.engine.settings import WorkerSettings
from mlxd.engine.batching.slots.table import Resident, SlotRegistry


def test_context_is_split_per_slot_unless_unified() -> None:
    assert WorkerSettings(parallel=2, ctx_size=512).n_ctx_slot(8192) == 256
    assert WorkerSettings(parallel=2, ctx_size=0).n_ctx_slot(8192) == 4096
    auto = WorkerSettings(parallel=-1, ctx_size=512)
    assert auto.n_parallel == 4 and auto.unified and auto.n_ctx_slot(8192) == 512
    assert WorkerSettings(parallel=-1, ctx_size=512, kv_unified=False).n_ctx_slot(8192) == 128
    assert WorkerSettings(cache_ram=-1).cache_ram_bytes is None
    assert WorkerSettings(cache_ram=2).cache_ram_bytes == 2 << 20


def test_slot_choice_prefers_a_matching_prefix_then_the_least_recently_used() -> None:
    reg = SlotRegistry(3, 64)
    a, b, c = reg.slots
    a.t_last_used, b.t_last_used, c.t_last_used = 3.0, 1.0, 2.0
    prompt = list(range(20))
    assert reg.choose(prompt, "raw") is b  # nothing cached: least recently used
    c.resident = Resident("raw", list(range(10)) + [99], [])
    assert reg.choose(prompt, "raw") is c  # 10 of 20 tokens in common
    assert reg.choose(prompt, "chat") is b  # another namespace never matches
    c.resident = Resident("raw", [0, 99], [])
    assert reg.choose(prompt, "raw") is b  # 1 of 20 is under upstream's 0.1 similarity
    assert reg.choose(prompt, "raw", id_slot=0) is a


def test_a_pinned_busy_slot_makes_the_request_wait() -> None:
    reg = SlotRegistry(2, 64)
    reg.slots[1].seq = object()  # type: ignore[assignment]
    assert reg.choose([1, 2], "raw", id_slot=1) is None
    assert reg.choose([1, 2], "raw") is reg.slots[0]


def test_slot_save_erase_restore_round_trip(tiny_model, make_worker, tmp_path) -> None:
    import pytest

    from mlxd.errors import InvalidRequest
    from tests.engine.conftest import PROMPTS, final, greedy_request

    worker = make_worker(parallel=1, cache_ram=0)
    prompt = list(tiny_model.tokenizer.encode(PROMPTS[0] * 4))
    first = final(worker.submit(greedy_request(prompt, 8)))
    n_cached = len(worker.scheduler.slots.slots[0].resident.tokens)
    assert n_cached >= len(prompt) + 7  # the prompt and the tokens fed back (the last one too when pipelined)
    assert worker.save_slot(0, tmp_path / "s.bin") == n_cached
    assert worker.erase_slot(0) == n_cached and worker.erase_slot(0) == 0
    assert worker.restore_slot(0, tmp_path / "s.bin") == n_cached
    again = final(worker.submit(greedy_request(prompt, 8)))
    assert again.timings.cache_n == len(prompt) - 1 and again.tokens == first.tokens
    (tmp_path / "junk.bin").write_bytes(b"not a slot")
    with pytest.raises(InvalidRequest, match="Unable to restore slot"):
        worker.restore_slot(0, tmp_path / "junk.bin")
    with pytest.raises(InvalidRequest, match="Invalid slot ID"):
        worker.erase_slot(3)
