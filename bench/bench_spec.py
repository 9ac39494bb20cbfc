"""Speculative decoding and KV cache types in mlxd's worker, side by side: ``python -m bench.bench_spec``.

- the self-speculative pair: ``tiny`` with ``--passthrough`` do-nothing layers as the target, ``tiny`` as the
  draft (it always agrees), 1 and 8 streams, against the same target without a draft;
- a draft that never agrees (``tiny`` with another seed): what it costs against no draft;
- ``-ctk q8_0 -ctv q8_0`` against ``f16`` on ``tiny-hd32`` with a prompt that fills most of an 8k context: the KV
  memory the slot holds afterwards (the cache arrays' bytes) and the decode rate at that depth; plus the same
  ratio for Qwen3-0.6B's shapes in bf16, from the cache type's own arithmetic (no weights are made).

Greedy requests that run to ``--tokens`` (EOS banned); decode tokens/s is tokens over the time from the first token
to the last, summed over streams. Every configuration runs once untimed first; ``--repeat`` turns take medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from mlxd.engine.cpu import blas  # before mlx is imported: the BLAS the daemon's --cpu-blas auto loads

BLAS = blas.preload("auto")

from mlxd.engine.loading.loader import load_model  # noqa: E402
from mlxd.engine.sampling import SamplingParams  # noqa: E402
from mlxd.engine.settings import WorkerSettings  # noqa: E402
from mlxd.engine.types import FinalEvent, GenerationRequest  # noqa: E402
from mlxd.engine.batching.worker import ModelWorker  # noqa: E402
from tests.conftest import synthetic_checkpoint  # noqa: E402

TEXT = "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"


def _requests(model: Any, streams: int, length: int, tokens: int) -> list[GenerationRequest]:
    eos = {int(t): -1e9 for t in model.eos_token_ids}
    greedy = SamplingParams(temperature=0.0, logit_bias=eos)
    return [GenerationRequest(prompt_tokens=list(model.tokenizer.encode(f"# {i}\n" + TEXT * (1 + length // 20)))
                              [:length], sampling=greedy, n_predict=tokens, cache_prompt=False) for i in range(streams)]


def decode_rate(worker: ModelWorker, requests: list[GenerationRequest]) -> float:
    """Summed per-stream decode tokens/s of one round of concurrent requests."""
    finals = [h.result() for h in [worker.submit(r) for r in requests]]
    assert all(isinstance(f, FinalEvent) for f in finals), finals
    return sum(f.timings.predicted_per_second for f in finals)


def measure(model: Any, drafts: dict[str, Any], streams: int, tokens: int, repeat: int,
            length: int = 32) -> dict[str, tuple[float, dict[str, Any] | None]]:
    """Median decode rate per draft (None: no draft), the configurations taking turns round by round so that a
    shared machine's drift falls on all of them alike.

    One worker lives at a time: each turn starts its configuration's worker, runs one untimed round (kernels and
    compiled steps for these shapes) and one timed round, and stops it. With two pinned workers alive in one
    process (``--worker-affinity auto``) whichever started second decoded 4 to 7 times slower, whatever its
    draft, which is what this benchmark's never-agreeing figure measured before (docs/benchmarks.md section 7).
    """
    requests = _requests(model, streams, length, tokens)
    rates: dict[str, list[float]] = {name: [] for name in drafts}
    info: dict[str, dict[str, Any] | None] = {}
    for _ in range(repeat):
        for name, draft in drafts.items():
            w = ModelWorker(model, WorkerSettings(ctx_size=streams * (length + tokens + 64), parallel=streams),
                            draft=draft)
            try:
                w.start()
                decode_rate(w, requests)  # untimed
                rates[name].append(decode_rate(w, requests))
                info[name] = w.speculative_info()
            finally:
                w.stop(0.0)
    return {name: (statistics.median(rates[name]), info[name]) for name in drafts}


def kv_depth(model: Any, kind: str, prompt: int, tokens: int) -> dict[str, float]:
    """One stream whose prompt fills ``prompt`` positions: decode tokens/s there and the slot's KV bytes."""
    worker = ModelWorker(model, WorkerSettings(ctx_size=8192, parallel=1, cache_type_k=kind, cache_type_v=kind))
    worker.start()
    try:
        [request] = _requests(model, 1, prompt, tokens)
        request = GenerationRequest(prompt_tokens=(request.prompt_tokens * (prompt // len(request.prompt_tokens) + 1))
                                    [:prompt], sampling=request.sampling, n_predict=tokens, cache_prompt=False)
        rate = decode_rate(worker, [request])
        rate = decode_rate(worker, [request])
        resident = worker.scheduler.slots.slots[0].resident
        held = sum(c.nbytes for c in resident.kv) if resident is not None else 0
        per_token = worker.kv_cache_info()["bytes_per_token"]
        return {"decode_tps": round(rate, 1), "kv_bytes_held": held, "bytes_per_token": per_token,
                "kv_bytes_at_8k": per_token * 8192}
    finally:
        worker.stop(0.0)


def qwen3_ratio() -> dict[str, float]:
    """q8_0 / f16 KV bytes per token for Qwen3-0.6B's shapes in bf16 (a model built lazily, never evaluated)."""
    import mlx.core as mx
    from mlx_lm.models import qwen3

    from mlxd.engine.loading import kv_types

    args = qwen3.ModelArgs(model_type="qwen3", hidden_size=1024, num_hidden_layers=28, intermediate_size=3072,
                           num_attention_heads=16, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                           vocab_size=151936, max_position_embeddings=40960, rope_theta=1e6,
                           tie_word_embeddings=True)
    model = qwen3.Model(args)
    q8 = kv_types.fit(kv_types.resolve("q8_0", "q8_0", True), model)
    f16 = kv_types.resolve("f16", "f16", True)
    a, b = (kv_types.bytes_per_token(k, model, mx.bfloat16) for k in (q8, f16))
    return {"q8_0_bytes_per_token": a, "f16_bytes_per_token": b, "ratio": round(a / b, 4), "group": q8.group_size}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--passthrough", type=int, default=30)
    ap.add_argument("--depth", type=int, default=7680, help="prompt positions before the KV-type decode figure")
    ap.add_argument("--out", type=Path, default=Path(".cache/bench-results/spec.json"))
    ap.add_argument("--only", choices=("drafts", "kv"), help="one half: the draft pairs or the KV cache types")
    args = ap.parse_args(argv)
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "command": " ".join(["python -m bench.bench_spec", *argv]), "blas": BLAS.describe(),
                              "target": f"tiny + {args.passthrough} passthrough layers", "tokens": args.tokens}
    if args.only != "kv":
        draft_pairs(args, report)
    if args.only != "drafts":
        hd32 = load_model(synthetic_checkpoint("tiny-hd32"))
        # The two types take turns, a fresh worker each, so that the machine's drift falls on both alike; the
        # decode ratio is the median of the turns' ratios.
        turns = [{kind: kv_depth(hd32, kind, args.depth, args.tokens) for kind in ("f16", "q8_0")}
                 for _ in range(args.repeat)]
        kv: dict[str, Any] = {kind: dict(turns[0][kind], decode_tps=statistics.median(
            t[kind]["decode_tps"] for t in turns)) for kind in ("f16", "q8_0")}
        kv["turns_decode_tps"] = [[t["f16"]["decode_tps"], t["q8_0"]["decode_tps"]] for t in turns]
        kv["q8_0_over_f16_memory"] = round(kv["q8_0"]["kv_bytes_held"] / kv["f16"]["kv_bytes_held"], 3)
        kv["q8_0_over_f16_decode"] = round(statistics.median(
            t["q8_0"]["decode_tps"] / t["f16"]["decode_tps"] for t in turns), 2)
        kv["qwen3_0.6b_bf16"] = qwen3_ratio()
        report["kv_types_tiny_hd32"] = kv
        print(json.dumps(kv), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


def draft_pairs(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """The self-speculative pair and the never-agreeing draft against no draft, at 1 and 8 streams."""
    target = load_model(synthetic_checkpoint("tiny", passthrough=args.passthrough))
    draft = load_model(synthetic_checkpoint("tiny"))
    stranger = load_model(synthetic_checkpoint("tiny", seed=1))
    for streams in (1, 8):
        got = measure(target, {"none": None, "self": draft, "never": stranger}, streams, args.tokens, args.repeat)
        (plain, _), (paired, info), (never, info_never) = got["none"], got["self"], got["never"]
        report[f"{streams}_streams"] = {
            "no_draft_tps": round(plain, 1), "self_draft_tps": round(paired, 1),
            "self_draft_speedup": round(paired / plain, 2), "never_agreeing_tps": round(never, 1),
            "never_agreeing_ratio": round(never / plain, 2),
            "self_draft_acceptance": round(info["n_accepted"] / max(1, info["n_drafted"]), 3) if info else None,
            "never_agreeing_drafted": info_never["n_drafted"] if info_never else None,
        }
        print(streams, report[f"{streams}_streams"], flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
