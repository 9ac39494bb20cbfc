"""In-process engine benchmark: mlxd's model worker against mlx-lm on the same checkpoint.

    .venv/bin/python bench/bench_engine.py CHECKPOINT [--tokens 256] [--prompt 512] [--streams 1,4,8,16]

Measures, greedy, in one process (no HTTP):
- time to first token for a 1024-token prefix, cold and from the prompt cache;
- one stream: decode tokens/s of ``mlx_lm.stream_generate`` and of the worker (from first to last token), and
  prefill tokens/s of both on a ``--prompt``-token prompt;
- aggregate tokens/s and p50/p95 time to first token with 1/4/8/16 concurrent requests through the worker (as
  many slots as streams, read by one asyncio loop), and mlx-lm's own ``batch_generate`` on the same prompts.
Prints one JSON document. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlxd.engine.cpu import blas  # noqa: E402  (before mlx is imported)

BLAS = blas.preload("auto")

import mlx.core as mx  # noqa: E402
from mlx_lm import batch_generate, stream_generate  # noqa: E402

from mlxd.engine.loading.loader import load_model  # noqa: E402
from mlxd.engine.sampling import SamplingParams  # noqa: E402
from mlxd.engine.settings import WorkerSettings  # noqa: E402
from mlxd.engine.types import FinalEvent, GenerationRequest, TokenEvent  # noqa: E402
from mlxd.engine.batching.worker import ModelWorker  # noqa: E402

GREEDY = SamplingParams(temperature=0.0)
TEXT = "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"


def prompt_of(loaded: Any, n: int, salt: int = 0) -> list[int]:
    ids = list(loaded.tokenizer.encode(f"# {salt}\n" + TEXT * (1 + n // 20)))
    return ids[:n]


def mlx_lm_one_stream(loaded: Any, prompt: list[int], n: int) -> tuple[float, float]:
    """(prefill tokens/s, decode tokens/s) as mlx_lm.stream_generate reports them."""
    last = None
    for last in stream_generate(loaded.model, loaded.tokenizer, prompt, max_tokens=n):
        pass
    assert last is not None
    return last.prompt_tps, last.generation_tps


def scheduler_one_stream(loaded: Any, prompt: list[int], n: int) -> float:
    """Decode tokens/s of mlxd's scheduler stepped by hand on the calling thread, on mlx-lm's generation stream:
    the worker's per-step work without its thread, queue or events, for a like-for-like with ``stream_generate``."""
    from mlx_lm.generate import generation_stream

    from mlxd.engine.batching.detokenize import fast_decoder
    from mlxd.engine.batching.handle import RequestHandle
    from mlxd.engine.batching.samplers import ChainSampling, TokenizerVocab
    from mlxd.engine.batching.scheduler import Scheduler

    settings = WorkerSettings(ctx_size=len(prompt) + n + 16, parallel=1)
    n_ctx = settings.n_ctx_slot(loaded.n_ctx_train)
    vocab = TokenizerVocab(loaded.tokenizer, loaded.vocab_size, loaded.eos_token_ids)
    with mx.stream(generation_stream):
        scheduler = Scheduler(loaded.model, decode=fast_decoder(loaded.tokenizer), eos_ids=set(loaded.eos_token_ids),
                              vocab_size=loaded.vocab_size, settings=settings, n_ctx_slot=n_ctx,
                              sampling=ChainSampling(vocab, n_ctx))
        request = GenerationRequest(prompt_tokens=prompt, sampling=GREEDY, n_predict=n, cache_prompt=False)
        scheduler.add(RequestHandle(request, 1, lambda handle: None))
        while not len(scheduler.batch):  # the prompt, up to the first token
            scheduler.step()
        t0, steps = time.perf_counter(), 0
        while len(scheduler.batch):
            scheduler.step()
            steps += 1
        return steps / (time.perf_counter() - t0)


def worker_one_stream(worker: ModelWorker, prompt: list[int], n: int) -> tuple[float, float]:
    """(prefill tokens/s, decode tokens/s after the first token) through the worker."""
    handle = worker.submit(GenerationRequest(prompt_tokens=prompt, sampling=GREEDY, n_predict=n, cache_prompt=False))
    t_first = t_last = 0.0
    count = 0
    final = None
    for event in handle:
        now = time.perf_counter()
        if isinstance(event, TokenEvent):
            count += 1
            t_first = t_first or now
            t_last = now
        elif isinstance(event, FinalEvent):
            final = event
    assert final is not None, "the request failed"
    decode = (count - 1) / (t_last - t_first) if count > 1 else 0.0
    return final.timings.prompt_per_second, decode


def worker_ttft(worker: ModelWorker, prompt: list[int], cache: bool) -> float:
    """Seconds from submit to the first token."""
    t0 = time.perf_counter()
    handle = worker.submit(GenerationRequest(prompt_tokens=prompt, sampling=GREEDY, n_predict=2, cache_prompt=cache))
    first = next(iter(handle))
    ttft = time.perf_counter() - t0
    assert isinstance(first, TokenEvent), first
    handle.result()
    return ttft


def worker_aggregate(worker: ModelWorker, prompts: list[list[int]], n: int) -> tuple[float, float, float]:
    """(aggregate tokens/s, p50 and p95 seconds to first token) for concurrent requests read by one event loop."""

    async def run() -> tuple[float, float, float]:
        t0 = time.perf_counter()
        handles = [
            worker.submit(GenerationRequest(prompt_tokens=p, sampling=GREEDY, n_predict=n, cache_prompt=False))
            for p in prompts
        ]

        async def read(handle: Any) -> tuple[int, float]:
            first = 0.0
            async for event in handle:
                if isinstance(event, TokenEvent) and not first:
                    first = time.perf_counter() - t0
                elif isinstance(event, FinalEvent):
                    return len(event.tokens), first
            raise RuntimeError("the request failed")

        done = await asyncio.gather(*(read(h) for h in handles))
        elapsed = time.perf_counter() - t0
        ttft = sorted(t for _, t in done)
        return sum(k for k, _ in done) / elapsed, ttft[len(ttft) // 2], ttft[min(len(ttft) - 1, int(0.95 * len(ttft)))]

    return asyncio.run(run())


def mlx_lm_aggregate(loaded: Any, prompts: list[list[int]], n: int) -> float:
    t0 = time.perf_counter()
    out = batch_generate(loaded.model, loaded.tokenizer, prompts, max_tokens=n, verbose=False, return_token_ids=True)
    total = sum(len(ids) for ids in out.token_ids or [])
    return total / (time.perf_counter() - t0)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--tokens", type=int, default=256, help="tokens generated per request")
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens for the prefill measurement")
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (the best is kept)")
    args = ap.parse_args(argv)
    loaded = load_model(args.checkpoint)
    streams = [int(s) for s in args.streams.split(",")]
    short = prompt_of(loaded, 16)
    long = prompt_of(loaded, args.prompt)
    result: dict[str, Any] = {
        "checkpoint": str(args.checkpoint),
        "blas": f"{BLAS.chosen} ({BLAS.library or 'mlx bundled'})",
        "device": str(mx.default_device()),
        "tokens": args.tokens,
    }

    mlx_lm_one_stream(loaded, short, 16)  # warm-up
    lm = [mlx_lm_one_stream(loaded, short, args.tokens) for _ in range(args.repeat)]
    lm_prefill = [mlx_lm_one_stream(loaded, long, 2) for _ in range(args.repeat)]

    worker = ModelWorker(loaded, WorkerSettings(parallel=1, ctx_size=args.prompt + args.tokens + 64))
    worker.start()
    try:
        worker_one_stream(worker, short, 16)  # warm-up
        ours = [worker_one_stream(worker, short, args.tokens) for _ in range(args.repeat)]
        ours_prefill = [worker_one_stream(worker, long, 2) for _ in range(args.repeat)]
    finally:
        worker.stop(0)
    worker = ModelWorker(loaded, WorkerSettings(parallel=1, ctx_size=1024 + 64 + 64))
    worker.start()
    try:
        prefix = prompt_of(loaded, 1024)
        cold = min(worker_ttft(worker, prefix + prompt_of(loaded, 16, salt=i), False) for i in range(args.repeat))
        worker_ttft(worker, prefix + prompt_of(loaded, 16, salt=99), True)  # fills the cache
        cached = min(worker_ttft(worker, prefix + prompt_of(loaded, 16, salt=i), True) for i in range(args.repeat))
    finally:
        worker.stop(0)
    result["ttft_1024_prefix_s"] = {"cold": cold, "cached": cached, "ratio": cached / cold}

    result["one_stream"] = {
        "decode_tps": {"mlx_lm": max(d for _, d in lm), "mlxd": max(d for _, d in ours)},
        "prefill_tps": {"mlx_lm": max(p for p, _ in lm_prefill), "mlxd": max(p for p, _ in ours_prefill)},
    }
    one = result["one_stream"]
    one["decode_ratio"] = one["decode_tps"]["mlxd"] / one["decode_tps"]["mlx_lm"]
    one["prefill_ratio"] = one["prefill_tps"]["mlxd"] / one["prefill_tps"]["mlx_lm"]

    aggregate: dict[str, Any] = {}
    for n in streams:
        prompts = [prompt_of(loaded, 16 + i, salt=i) for i in range(n)]
        worker = ModelWorker(loaded, WorkerSettings(parallel=n, ctx_size=n * (args.tokens + 64)))
        worker.start()
        try:
            worker_aggregate(worker, prompts, 8)  # warm-up
            ours = max((worker_aggregate(worker, prompts, args.tokens) for _ in range(args.repeat)), key=lambda r: r[0])
        finally:
            worker.stop(0)
        mlx_lm_aggregate(loaded, prompts, 8)
        theirs = max(mlx_lm_aggregate(loaded, prompts, args.tokens) for _ in range(args.repeat))
        aggregate[str(n)] = {
            "mlxd": ours[0],
            "mlxd_ttft_p50_s": ours[1],
            "mlxd_ttft_p95_s": ours[2],
            "mlx_lm_batch_generate": theirs,
        }
    result["aggregate_tps"] = aggregate
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
