"""The decode step's cost, two schedulers side by side on one thread: ``python -m bench.bench_step``.

Two of mlxd's schedulers, stepped by hand on one thread placed as a model worker places itself (``--worker-affinity
auto``), with OpenBLAS loaded as the daemon loads it (``--cpu-blas auto``), take turns in blocks of ``--block``
steps until both are idle, so that a shared machine's load falls on both alike (a figure is their time ratio,
not two runs minutes apart). No worker thread, no HTTP; prompts count towards both alike.

- ``compiled``: the decode step through ``mx.compile`` (engine.batching.compiled) against the uncompiled forward pass,
  greedy, at each ``--streams`` count, on ``CHECKPOINT`` (default: the synthetic ``tiny``);
- ``never``: the passthrough target of bench_spec (``tiny`` with 30 do-nothing layers) without a draft and with a
  draft that never agrees (``tiny``, seed 1), 8 streams, ``--rounds`` rounds of requests after one warm-up round,
  the draft's adaptive length carrying over from round to round as in a serving worker;
- ``self``: the same target without a draft and with the self-speculative draft (``tiny``, which always agrees),
  at 1 and 8 streams;
- ``arrivals``: one scheduler, rounds of ``--streams`` (its largest count) greedy requests of 16-token prompts that
  reach it all in one step, or a few in each step as they do over HTTP (8, 4, 1 a step), the arrival patterns taking
  turns round by round: milliseconds per round, the median of ``--rounds`` after an untimed one;
- ``capacity``: the compiled step's KV capacity buckets (engine.batching.step_caches ``capacity_for``: by 32 between 64 and
  256 entries) against doubling ones below 256 (their rule until 2026-12-02), one scheduler per ``--streams``
  count, the two rules taking turns round by round on rounds of greedy requests of 16-token prompts: new over old
  time, the median of ``--rounds`` after an untimed round of each;
- ``ubatch``: one greedy request whose prompt has ``--prompt-tokens`` tokens (1024), processed in forward passes of
  ``--ubatch-size`` 2048 (one pass), 512 (the default), 256 and 128 tokens, one scheduler each, taking turns:
  milliseconds from the request to its first token, the median of ``--rounds`` after an untimed one.

Prints one JSON document. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from mlxd.engine.cpu import blas  # before mlx is imported

BLAS = blas.preload("auto")

import mlx.core as mx  # noqa: E402

from bench.bench_spec import _requests  # noqa: E402
from mlxd.engine.cpu.affinity import keep_on_one_cpu  # noqa: E402
from mlxd.engine.batching import step_caches  # noqa: E402
from mlxd.engine.batching.detokenize import fast_decoder  # noqa: E402
from mlxd.engine.batching.handle import RequestHandle  # noqa: E402
from mlxd.engine.loading.loader import load_model  # noqa: E402
from mlxd.engine.batching.samplers import ChainSampling, TokenizerVocab  # noqa: E402
from mlxd.engine.batching.scheduler import Scheduler  # noqa: E402
from mlxd.engine.settings import WorkerSettings  # noqa: E402
from mlxd.engine.threads import run_on_own_thread  # noqa: E402
from tests.conftest import synthetic_checkpoint  # noqa: E402


def scheduler(loaded: Any, streams: int, n_ctx_slot: int, draft: Any = None, compiled: bool = True,
              draft_n_max: int | None = None) -> Scheduler:
    extra = {} if draft_n_max is None else {"spec_draft_n_max": draft_n_max}
    settings = WorkerSettings(ctx_size=streams * n_ctx_slot, parallel=streams, **extra)
    n_ctx = settings.n_ctx_slot(loaded.n_ctx_train)
    vocab = TokenizerVocab(loaded.tokenizer, loaded.vocab_size, loaded.eos_token_ids)
    s = Scheduler(loaded.model, decode=fast_decoder(loaded.tokenizer), eos_ids=set(loaded.eos_token_ids),
                  vocab_size=loaded.vocab_size, settings=settings, n_ctx_slot=n_ctx,
                  sampling=ChainSampling(vocab, n_ctx), draft=draft.model if draft is not None else None)
    if not compiled:
        s.compiled = None
    return s


def take_turns(scheds: dict[str, Scheduler], block: int) -> dict[str, float]:
    """Step every scheduler ``block`` steps in turn until all are idle; seconds each spent."""
    spent = {k: 0.0 for k in scheds}
    while any(not s.idle for s in scheds.values()):
        for k, s in scheds.items():
            t0 = time.perf_counter()
            for _ in range(block):
                if not s.idle:
                    s.step()
            spent[k] += time.perf_counter() - t0
    return spent


def submit(s: Scheduler, requests: list[Any], base: int) -> None:
    for i, r in enumerate(requests):
        s.add(RequestHandle(r, base + i, lambda h: None))


def compiled_figures(loaded: Any, streams: list[int], tokens: int, block: int) -> dict[str, Any]:
    out = {}
    for n in streams:
        requests = _requests(loaded, n, 32, tokens)
        scheds = {"uncompiled": scheduler(loaded, n, 32 + tokens + 64, compiled=False),
                  "compiled": scheduler(loaded, n, 32 + tokens + 64)}
        for k, s in scheds.items():  # untimed: kernels and traces for these shapes
            submit(s, requests, 0)
        take_turns(scheds, block)
        for k, s in scheds.items():
            submit(s, requests, 100)
        spent = take_turns(scheds, block)
        out[str(n)] = {f"{k}_tps": round(n * tokens / v, 1) for k, v in spent.items()}
        out[str(n)]["speedup"] = round(spent["uncompiled"] / spent["compiled"], 2)
        print(n, out[str(n)], flush=True)
    return out


def arrival_figures(loaded: Any, streams: int, tokens: int, rounds: int) -> dict[str, Any]:
    """Milliseconds per round of ``streams`` requests arriving ``k`` a step, for k in (streams, 8, 4, 1)."""
    s = scheduler(loaded, streams, 16 + tokens + 64)
    requests = _requests(loaded, streams, 16, tokens)
    patterns = sorted({streams, 8, 4, 1}, reverse=True)
    spent: dict[int, list[float]] = {k: [] for k in patterns}
    base = 0
    for rnd in range(rounds + 1):
        for k in patterns:
            pending, started = list(requests), time.perf_counter()
            while pending or not s.idle:
                arriving, pending = pending[:k], pending[k:]
                submit(s, arriving, base)
                base += len(arriving)
                s.step()
            if rnd:  # round 0: traces and buffers for these shapes
                spent[k].append(time.perf_counter() - started)
    out = {f"{k}_a_step_ms": round(statistics.median(v) * 1e3, 1) for k, v in spent.items()}
    print("arrivals", streams, out, flush=True)
    return out


def doubling_capacity(n: int) -> int:
    """The KV buckets before 2026-12-02: doubling from 32 to 256 entries, then multiples of 256."""
    if n <= step_caches.STEP:
        return max(step_caches.SMALLEST, 1 << (n - 1).bit_length())
    return -(-n // step_caches.STEP) * step_caches.STEP


def capacity_figures(loaded: Any, streams: list[int], tokens: int, rounds: int) -> dict[str, Any]:
    """New over old time per round, per stream count: the buckets ``capacity_for`` gives against doubling ones."""
    rules = {"by_32": step_caches.capacity_for, "doubling": doubling_capacity}
    out = {}
    try:
        for n in streams:
            s = scheduler(loaded, n, 16 + tokens + 64)
            requests = _requests(loaded, n, 16, tokens)
            spent: dict[str, list[float]] = {k: [] for k in rules}
            for rnd in range(rounds + 1):
                for name in (list(rules) if rnd % 2 else list(rules)[::-1]):
                    step_caches.capacity_for = rules[name]  # read by step_caches.fit at every compiled step
                    submit(s, requests, 1000 * rnd + (name == "doubling") * 500)
                    started = time.perf_counter()
                    while not s.idle:
                        s.step()
                    if rnd:  # round 0: traces for these shapes
                        spent[name].append(time.perf_counter() - started)
            medians = {k: statistics.median(v) for k, v in spent.items()}
            out[str(n)] = {f"{k}_tps": round(n * tokens / v, 1) for k, v in medians.items()}
            out[str(n)]["by_32_over_doubling_time"] = round(medians["by_32"] / medians["doubling"], 3)
            print("capacity", n, out[str(n)], flush=True)
    finally:
        step_caches.capacity_for = rules["by_32"]
    return out


def ubatch_figures(loaded: Any, prompt_tokens: int, rounds: int) -> dict[str, Any]:
    """Milliseconds from a ``prompt_tokens`` prompt to its first token, per ``--ubatch-size``."""
    request = _requests(loaded, 1, prompt_tokens, 1)
    scheds = {}
    for ubatch in (2048, 512, 256, 128):
        s = scheduler(loaded, 1, prompt_tokens + 64)
        s.settings = s.settings.model_copy(update={"ubatch_size": ubatch})
        scheds[ubatch] = s
    spent: dict[int, list[float]] = {k: [] for k in scheds}
    for rnd in range(rounds + 1):
        for ubatch, s in scheds.items():
            submit(s, request, rnd)
            started = time.perf_counter()
            while not s.idle:
                s.step()
            if rnd:
                spent[ubatch].append(time.perf_counter() - started)
    out = {f"ubatch_{k}_ms": round(statistics.median(v) * 1e3, 1) for k, v in spent.items()}
    print("ubatch", prompt_tokens, out, flush=True)
    return out


def draft_figures(tokens: int, rounds: int, block: int, streams: int, seed: int,
                  draft_n_max: int | None = None) -> dict[str, Any]:
    """No draft against the draft ``tiny`` with ``seed`` (0: the self-speculative pair, 1: never agreeing), drafting
    up to ``draft_n_max`` tokens a step (``--spec-draft-n-max``; None: its default)."""
    target = load_model(synthetic_checkpoint("tiny", passthrough=30))
    other = load_model(synthetic_checkpoint("tiny", seed=seed) if seed else synthetic_checkpoint("tiny"))
    name = "never" if seed else "self"
    scheds = {"none": scheduler(target, streams, 32 + tokens + 64),
              name: scheduler(target, streams, 32 + tokens + 64, draft=other, draft_n_max=draft_n_max)}
    total = {k: 0.0 for k in scheds}
    for rnd in range(rounds + 1):
        for s in scheds.values():
            submit(s, _requests(target, streams, 32, tokens), 100 * rnd)
        spent = take_turns(scheds, block)
        if rnd:  # round 0 is the warm-up
            total = {k: total[k] + spent[k] for k in scheds}
    stats = scheds[name].spec_stats
    out = {f"{k}_s": round(v, 2) for k, v in total.items()}
    out.update({"spec_draft_n_max": scheds[name].spec.n_max,
                f"{name}_over_none_time": round(total[name] / total["none"], 3), "drafted": stats.drafted,
                "accepted": stats.accepted, "speculative_steps": stats.steps})
    print(name, streams, out, flush=True)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path, nargs="?")
    ap.add_argument("--streams", default="1,8,32")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--block", type=int, default=16, help="steps per turn")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds of the never-agreeing and arrivals figures")
    ap.add_argument("--only", choices=("compiled", "never", "self", "arrivals", "ubatch", "capacity"))
    ap.add_argument("--prompt-tokens", type=int, default=1024, help="prompt length of the ubatch figures")
    ap.add_argument("--draft-n-max", type=int, help="--spec-draft-n-max of the draft figures (default: its default)")
    ap.add_argument("--out", type=Path, default=Path(".cache/bench-results/step.json"))
    args = ap.parse_args(argv)
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "command": " ".join(["python -m bench.bench_step", *argv]), "blas": BLAS.describe()}
    # On a thread of its own, as a model worker: pinned with the stream it creates (engine.cpu.affinity).
    run_on_own_thread(measure, args, report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


def measure(args: argparse.Namespace, report: dict[str, Any]) -> None:
    placement = keep_on_one_cpu()
    report["placement"] = "kernel's" if placement is None else f"CPU {placement.cpu}, batch {placement.batch_policy}"
    with mx.stream(mx.new_thread_local_stream(mx.default_device())):
        if args.only in (None, "compiled"):
            loaded = load_model(args.checkpoint or synthetic_checkpoint("tiny"))
            report["compiled"] = compiled_figures(loaded, [int(s) for s in args.streams.split(",")], args.tokens,
                                                  args.block)
        if args.only in (None, "arrivals"):
            loaded = load_model(args.checkpoint or synthetic_checkpoint("tiny"))
            report["arrivals"] = arrival_figures(loaded, max(int(n) for n in args.streams.split(",")), args.tokens,
                                                 args.rounds)
        if args.only in (None, "capacity"):
            loaded = load_model(args.checkpoint or synthetic_checkpoint("tiny"))
            report["capacity"] = capacity_figures(loaded, [int(n) for n in args.streams.split(",")],
                                                  min(args.tokens, 128), args.rounds)
        if args.only in (None, "ubatch"):
            loaded = load_model(args.checkpoint or synthetic_checkpoint("tiny"))
            report["ubatch"] = ubatch_figures(loaded, args.prompt_tokens, args.rounds)
        if args.only in (None, "never"):
            report["never_agreeing_8_streams"] = draft_figures(min(args.tokens, 96), args.rounds, args.block, 8, 1,
                                                               args.draft_n_max)
        if args.only in (None, "self"):
            for n in (1, 8):
                report[f"self_speculative_{n}_streams"] = draft_figures(min(args.tokens, 96), args.rounds,
                                                                        args.block, n, 0, args.draft_n_max)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
