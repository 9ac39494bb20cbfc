"""The prompt cache's disk tier (--cache-disk): entries survive a worker, are reused only by a worker whose model and
KV settings produced them, and a bad file, a full or read-only disk never cost a correct answer."""

from __future__ import annotations

import errno
import hashlib
import os
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mlxd.engine.batching.prompt_cache import disk as prompt_disk

from mlxd.engine.batching.prompt_cache import disk_format as prompt_disk_format

from mlxd.engine.batching.prompt_cache import disk_tier as prompt_disk_tier
from mlxd.engine.loading.lora import AdapterSpec, attach_adapters
from mlxd.engine.batching.prompt_cache.disk_worth import Worth
from mlxd.engine.loading.loader import load_model
from mlxd.engine.settings import WorkerSettings
from mlxd.dev.synth_lora import make_adapter
from mlxd.engine.batching.worker import ModelWorker
from tests.conftest import synthetic_checkpoint
from tests.engine.conftest import PROMPTS, final, greedy_request

N = 12  # tokens generated per request


def prompt_of(model: Any, i: int = 0, times: int = 30) -> list[int]:
    return list(model.tokenizer.encode((PROMPTS[i] + " ") * times))


@pytest.fixture
def workers(tiny_model: Any) -> Iterator[Callable[..., ModelWorker]]:
    """Start workers (over the tiny model unless ``loaded=``); each is stopped at the end unless stopped before."""
    made: list[ModelWorker] = []

    def make(loaded: Any = None, lora: Any = None, **settings: Any) -> ModelWorker:
        settings.setdefault("ctx_size", 2048)
        settings.setdefault("parallel", 1)
        w = ModelWorker(loaded or tiny_model, WorkerSettings(**settings), lora=lora)
        w.start()
        made.append(w)
        return w

    yield make
    for w in made:
        w.stop(0.0)


def run(worker: ModelWorker, tokens: list[int], **fields: Any) -> tuple[list[int], int]:
    event = final(worker.submit(greedy_request(tokens, N, **fields)))
    return list(event.tokens), event.timings.cache_n


def stop(worker: ModelWorker) -> None:
    """Stop as a drain does: what the worker holds goes to its disk tier."""
    worker.stop(0.0, spill_timeout=30.0)


def entries(d: Path) -> list[Path]:
    return sorted(d.glob("*" + prompt_disk.SUFFIX))


def test_a_restored_entry_equals_the_cold_run(tiny_model, workers, tmp_path) -> None:
    prompt = prompt_of(tiny_model)
    extended = prompt + prompt_of(tiny_model, 1, 2)
    cold = workers(cache_ram=0)
    want = [run(cold, p, cache_prompt=False)[0] for p in (prompt, extended)]

    first = workers(cache_disk=str(tmp_path))
    assert run(first, prompt) == (want[0], 0)
    stop(first)
    assert len(entries(tmp_path)) == 1 and (tmp_path / prompt_disk.INDEX).exists()

    again = workers(cache_disk=str(tmp_path))  # a new worker: the store is opened again from the files
    tokens, cache_n = run(again, prompt)
    assert tokens == want[0] and cache_n == len(prompt) - 1
    stop(again)
    longer = workers(cache_disk=str(tmp_path))
    tokens, cache_n = run(longer, extended)
    assert tokens == want[1] and cache_n >= len(prompt)
    summary = prompt_disk_tier.summary()
    assert summary["hits"] >= 2 and summary["bytes_read"] > 0 and summary["bytes_written"] > 0


@pytest.mark.parametrize("kv_type", ["f16", "bf16", "q8_0", "q4_0"])
def test_every_cache_type_round_trips(workers, tmp_path, kv_type) -> None:
    model = load_model(synthetic_checkpoint("tiny-hd32"))  # quantized types need heads of 32 values or more
    prompt = prompt_of(model)
    types = {"cache_type_k": kv_type, "cache_type_v": kv_type}
    want = run(workers(loaded=model, cache_ram=0, **types), prompt, cache_prompt=False)[0]
    first = workers(loaded=model, cache_disk=str(tmp_path), **types)
    run(first, prompt)
    stop(first)
    assert len(entries(tmp_path)) == 1
    assert run(workers(loaded=model, cache_disk=str(tmp_path), **types), prompt) == (want, len(prompt) - 1)


def test_entries_evicted_from_ram_are_read_back(tiny_model, workers, tmp_path) -> None:
    a, b = prompt_of(tiny_model, 0), prompt_of(tiny_model, 3)
    want = run(workers(cache_ram=0), a, cache_prompt=False)[0]
    w = workers(cache_disk=str(tmp_path), cache_ram=0)  # no RAM tier: a slot's cache goes straight to disk
    run(w, a)
    run(w, b)  # the slot gives a's cache up
    store = w.scheduler.prompt_cache.disk.store  # type: ignore[union-attr]
    assert store.flush(time.monotonic() + 30)
    assert len(entries(tmp_path)) == 1
    assert run(w, a) == (want, len(a) - 1)


def test_short_prompts_are_not_written(tiny_model, workers, tmp_path) -> None:
    w = workers(cache_disk=str(tmp_path))
    short = list(tiny_model.tokenizer.encode(PROMPTS[1]))
    assert len(short) < Worth().min_tokens
    run(w, short)
    stop(w)
    assert entries(tmp_path) == []


def test_another_model_kv_type_or_lora_never_reuses_an_entry(tiny_model, tiny_checkpoint, workers, tmp_path) -> None:
    prompt = prompt_of(tiny_model)
    writer = workers(cache_disk=str(tmp_path))
    run(writer, prompt)
    stop(writer)
    assert len(entries(tmp_path)) == 1

    other = load_model(synthetic_checkpoint("tiny", seed=1))
    want = run(workers(loaded=other, cache_ram=0), prompt, cache_prompt=False)[0]
    assert run(workers(loaded=other, cache_disk=str(tmp_path)), prompt) == (want, 0)

    want = run(workers(cache_ram=0, cache_type_k="f16", cache_type_v="f16"), prompt, cache_prompt=False)[0]
    assert run(workers(cache_disk=str(tmp_path), cache_type_k="f16", cache_type_v="f16"), prompt) == (want, 0)

    adapter = make_adapter(tiny_model.model, tmp_path / "adapter", seed=1)

    def adapted(scale: float, **settings: Any) -> ModelWorker:
        loaded = load_model(tiny_checkpoint)
        return workers(loaded=loaded, lora=attach_adapters(loaded.model, [AdapterSpec(str(adapter), scale)]),
                       **settings)

    half = run(adapted(0.5, cache_ram=0), prompt, cache_prompt=False)[0]
    w = adapted(0.5, cache_disk=str(tmp_path / "lora"))
    assert run(w, prompt) == (half, 0)
    stop(w)
    assert run(adapted(0.5, cache_disk=str(tmp_path / "lora")), prompt) == (half, len(prompt) - 1)  # same scale
    full = run(adapted(4.0, cache_ram=0), prompt, cache_prompt=False)[0]
    assert full != half  # the scale matters to what is generated: an entry of the other would answer wrong
    assert run(adapted(4.0, cache_disk=str(tmp_path / "lora")), prompt) == (full, 0)  # other scale: not reused


def _write_one(tiny_model: Any, workers: Callable[..., ModelWorker], d: Path) -> tuple[list[int], list[int]]:
    prompt = prompt_of(tiny_model)
    w = workers(cache_disk=str(d))
    tokens, _ = run(w, prompt)
    stop(w)
    assert len(entries(d)) == 1
    return prompt, tokens


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign", "tmp-only"])
def test_damaged_files_are_skipped_and_serving_goes_on(tiny_model, workers, tmp_path, damage, caplog) -> None:
    prompt, want = _write_one(tiny_model, workers, tmp_path)
    path = entries(tmp_path)[0]
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "foreign":
        path.write_bytes(b"not an entry at all" * 10)
    else:  # a killed writer: only the temporary file exists
        path.rename(path.with_name(path.name + ".tmp"))
    before = prompt_disk_tier.summary()["corrupt"]
    w = workers(cache_disk=str(tmp_path))
    assert run(w, prompt) == (want, 0)
    assert not path.exists() or damage == "tmp-only" and not path.exists()
    assert list(tmp_path.glob("*.tmp")) == []
    if damage != "tmp-only":
        assert prompt_disk_tier.summary()["corrupt"] == before + 1
        assert "cache-disk" in caplog.text


@pytest.mark.parametrize("flip", [False, True])
def test_an_entry_of_format_1_is_still_read(tiny_model, workers, tmp_path, flip) -> None:
    """Entries written before format 2 (a CRC-32 trailer) survive the upgrade's restart; a damaged one is refused."""
    prompt, want = _write_one(tiny_model, workers, tmp_path)
    path = entries(tmp_path)[0]
    data = path.read_bytes()
    assert data.startswith(prompt_disk_format.MAGIC)
    body = prompt_disk_format.MAGIC_V1 + data[len(prompt_disk_format.MAGIC): -8]
    if flip:
        body = body[:-100] + bytes([body[-100] ^ 0x55]) + body[-99:]
    path.write_bytes(body + struct.pack("<I", zlib.crc32(prompt_disk_format.MAGIC_V1 + data[len(prompt_disk_format.MAGIC): -8])))
    (tmp_path / prompt_disk.INDEX).unlink()  # rebuilt from the files: their headers are read as format 1
    assert run(workers(cache_disk=str(tmp_path)), prompt) == (want, 0 if flip else len(prompt) - 1)


@pytest.mark.parametrize("loss", ["deleted", "garbage"])
def test_a_lost_index_is_rebuilt_from_the_entries(tiny_model, workers, tmp_path, loss) -> None:
    prompt, want = _write_one(tiny_model, workers, tmp_path)
    index = tmp_path / prompt_disk.INDEX
    if loss == "deleted":
        index.unlink()
    else:
        index.write_text("{not json")
    assert run(workers(cache_disk=str(tmp_path)), prompt) == (want, len(prompt) - 1)


def test_a_full_disk_makes_the_tier_read_only(tiny_model, workers, tmp_path, monkeypatch, caplog) -> None:
    prompt, want = _write_one(tiny_model, workers, tmp_path)

    def full(blob: Any, path: Path) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(prompt_disk_format, "write", full)
    w = workers(cache_disk=str(tmp_path))
    assert run(w, prompt) == (want, len(prompt) - 1)  # reads go on
    other = prompt_of(tiny_model, 2)
    run(w, other)
    stop(w)
    assert "read only" in caplog.text
    assert len(entries(tmp_path)) == 1


def test_a_directory_that_cannot_be_made_turns_the_tier_off(tiny_model, workers, tmp_path, caplog) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    prompt = prompt_of(tiny_model)
    want = run(workers(cache_ram=0), prompt, cache_prompt=False)[0]
    w = workers(cache_disk=str(blocker / "cache"))
    assert run(w, prompt) == (want, 0)
    assert run(w, prompt) == (want, len(prompt) - 1)  # RAM still serves
    stop(w)
    assert "disk tier is off" in caplog.text


def test_a_read_only_directory_keeps_serving(tiny_model, workers, tmp_path, monkeypatch) -> None:
    prompt, want = _write_one(tiny_model, workers, tmp_path)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if mode == os.W_OK else real(p, mode))
    w = workers(cache_disk=str(tmp_path))
    assert w.scheduler.prompt_cache.disk.store.state == "ro"  # type: ignore[union-attr]
    assert run(w, prompt) == (want, len(prompt) - 1)


def test_lru_eviction_under_the_budget(tiny_model, workers, tmp_path) -> None:
    # About 800 tokens each: the tiny model's entries are then 0.35-0.5 MiB, so two fit in 1 MiB and three do not.
    prompts = [prompt_of(tiny_model, i, 800 * 30 // len(prompt_of(tiny_model, i))) for i in range(3)]
    w = workers(cache_disk=str(tmp_path))
    run(w, prompts[0])
    stop(w)
    size = entries(tmp_path)[0].stat().st_size
    budget_mib = 1
    assert 2 * size < budget_mib * 2**20 < 3 * size, size  # the tiny model's entries: two fit, three do not
    for p in prompts[1:]:
        w = workers(cache_disk=str(tmp_path), cache_disk_max=budget_mib)
        run(w, p)
        stop(w)
    left = entries(tmp_path)
    assert len(left) == 2
    w = workers(cache_disk=str(tmp_path), cache_disk_max=budget_mib)
    assert run(w, prompts[0])[1] == 0  # the least recently used went
    assert run(w, prompts[2])[1] == len(prompts[2]) - 1


def test_another_image_never_reuses_an_entry(tmp_path) -> None:
    """The same placeholder tokens with another image's pixels: the media digest in the namespace keeps them
    apart on disk as in RAM."""
    pytest.importorskip("mlx_vlm")
    from mlxd.engine.vlm.load import load_multimodal
    from mlxd.engine.vlm.worker import make_worker
    from mlxd.engine.sampling import SamplingParams
    from mlxd.engine.types import GenerationRequest
    from mlxd.engine.vlm.inputs import Medium
    from tests.engine.test_multimodal import CHAT, MARKER, image

    def media_request(w: Any, seeds: list[int], **fields: Any) -> GenerationRequest:
        img = image(seeds[0])  # every seed the same size: the same placeholder tokens
        medium = Medium("image", img, hashlib.sha256(img.tobytes()).hexdigest())
        text = MARKER + "describe every detail of it " * 12  # a prompt long enough to be written
        ids, inputs = w.prepare(CHAT.format(text), MARKER, [medium]).result()
        return GenerationRequest(prompt_tokens=ids, sampling=SamplingParams(temperature=0.0), n_predict=N,
                                 media=inputs, cache_namespace=f"chat:media:{inputs.key}", **fields)

    model = load_multimodal(synthetic_checkpoint("qwen2-vl-tiny"))
    started: list[Any] = []

    def worker(**settings: Any) -> Any:
        w = make_worker(model, WorkerSettings(ctx_size=2048, parallel=1, warmup=False, **settings))
        w.start()
        started.append(w)
        return w

    def go(w: Any, seed: int, **fields: Any) -> tuple[list[int], int]:
        event = final(w.submit(media_request(w, [seed], **fields)))
        return list(event.tokens), event.timings.cache_n

    try:
        cold = worker(cache_ram=0)
        want = {seed: go(cold, seed, cache_prompt=False)[0] for seed in (0, 4)}
        n_prompt = len(media_request(cold, [0]).prompt_tokens)
        assert n_prompt >= Worth().min_tokens
        assert media_request(cold, [4]).prompt_tokens == media_request(cold, [0]).prompt_tokens
        writer = worker(cache_disk=str(tmp_path))
        go(writer, 0)
        stop(writer)
        assert len(entries(tmp_path)) == 1
        assert go(worker(cache_disk=str(tmp_path)), 4) == (want[4], 0)  # another image: not reused
        assert go(worker(cache_disk=str(tmp_path)), 0) == (want[0], n_prompt - 1)  # the same image: reused
    finally:
        for w in started:
            w.stop(0.0)


def test_a_worker_never_started_lets_its_store_go(tiny_model, tmp_path) -> None:
    w = ModelWorker(tiny_model, WorkerSettings(ctx_size=2048, cache_disk=str(tmp_path)))
    assert any(s.root == tmp_path for s in prompt_disk_tier.stores())
    w.stop(0.0)
    assert not any(s.root == tmp_path for s in prompt_disk_tier.stores())


def test_a_restarted_worker_s_slots_hold_the_most_recent_entries_that_fit(tiny_model, workers, tmp_path) -> None:
    a, b, c = prompt_of(tiny_model, 0), prompt_of(tiny_model, 3), prompt_of(tiny_model, 2, 10)
    first = workers(cache_disk=str(tmp_path), parallel=2)
    for p in (a, b, c):  # c takes a's slot (the least recently used): the slots end with b and c, a in RAM
        run(first, p)
    stop(first)
    assert len(entries(tmp_path)) == 3

    again = workers(cache_disk=str(tmp_path), parallel=2)
    held = [s.resident.tokens for s in again.scheduler.slots.slots if s.resident is not None]
    assert sorted(t[:len(p)] == p for t in held for p in (a, b, c)).count(True) == 2
    assert not any(t[:len(a)] == a for t in held) and any(t[:len(c)] == c for t in held)
    assert run(again, b)[1] == len(b) - 1
    stop(again)

    # A slot too small for any entry, or another KV cache type: nothing restored, and requests are served.
    small = workers(cache_disk=str(tmp_path), ctx_size=64)
    assert all(s.resident is None for s in small.scheduler.slots.slots)
    other = workers(cache_disk=str(tmp_path), cache_type_k="f16", cache_type_v="f16")
    assert all(s.resident is None for s in other.scheduler.slots.slots)
    assert run(other, c)[1] == 0
