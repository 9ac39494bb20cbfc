"""mlxd over HTTP side by side with raw mlx-lm on one machine: ``python -m bench.bench_gpu OUT_DIR [--preset P]``.

Made for the GPU machine (bench/gpu.sh runs it there on Qwen3-0.6B shapes in bf16); ``--preset tiny --dtype
float32`` runs the same figures on this CPU as a smoke run. Each figure is decode tokens/s; aggregates count every
stream's tokens over the round's wall time. Every shape is run once untimed first (mlx compiles kernels per shape).

- raw mlx-lm: ``stream_generate`` (1 stream) and ``BatchGenerator`` through ``batch_generate`` (N streams);
- mlxd: ``mlxd-server`` over HTTP with the project's streaming client, at the same stream counts;
- with a draft: the self-speculative pair (the preset with passthrough layers as target, the preset as draft),
  mlx-lm's ``stream_generate(draft_model=...)`` against mlxd's ``-md`` at 1 and 8 streams;
- with ``-ctk q8_0 -ctv q8_0``: mlxd at 1 and 8 streams, and its KV bytes per slot against the default.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.client import async_client, complete, concurrent_round, eos_bias
from bench.common import Server

TEXT = "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"


def checkpoints(root: Path, preset: str, dtype: str, passthrough: int) -> tuple[Path, Path]:
    """(the preset, the preset with ``passthrough`` do-nothing layers) under ``root``, made when missing."""
    from mlxd.dev import synth

    plain, target = root / f"{preset}-{dtype}", root / f"{preset}-{dtype}-pass{passthrough}"
    for path, extra in ((plain, 0), (target, passthrough)):
        if not (path / "config.json").exists():
            synth.make_checkpoint(path, preset=preset, dtype=dtype, passthrough=extra)  # type: ignore[arg-type]
    return plain, target


def prompts(tokenizer: Any, n: int, length: int) -> list[list[int]]:
    return [list(tokenizer.encode(f"# {i}\n" + TEXT * (1 + length // 20)))[:length] for i in range(n)]


def raw_mlx_lm(path: Path, draft: Path | None, streams: list[int], tokens: int, length: int) -> dict[str, float]:
    """mlx-lm's own loops: stream_generate for one stream (with the draft when given), batch_generate for more."""
    from mlx_lm import batch_generate, load, stream_generate

    model, tokenizer = load(str(path))
    draft_model = load(str(draft))[0] if draft is not None else None
    out: dict[str, float] = {}
    for n in streams:
        ps = prompts(tokenizer, n, length)
        for timed in (False, True):
            if n == 1:
                last = None
                kw = {"draft_model": draft_model} if draft_model is not None else {}
                for last in stream_generate(model, tokenizer, ps[0], max_tokens=tokens, **kw):
                    pass
                if timed and last is not None:
                    out[str(n)] = last.generation_tps
            else:
                t0 = time.perf_counter()
                res = batch_generate(model, tokenizer, ps, max_tokens=tokens, verbose=False, return_token_ids=True)
                if timed:
                    out[str(n)] = sum(len(t) for t in res.token_ids or []) / (time.perf_counter() - t0)
    return out


def mlxd_http(path: Path, extra: list[str], streams: list[int], tokens: int, length: int, log: Path,
              ctx: int) -> dict[str, Any]:
    """mlxd-server over HTTP: aggregate decode tokens/s per stream count, and what /props reports."""
    from mlx_lm import load

    tokenizer = load(str(path))[1]
    top = max(streams)
    # The console script may not sit beside the interpreter (a system Python's pip puts it elsewhere).
    program = [sys.executable, "-c", "from mlxd.daemon.cli import server_main; server_main()"]
    server = Server("mlxd", [*program, "-m", str(path), "-np", str(top), "-c", str(ctx * top), "--host", "127.0.0.1",
                             "--port", "0", *extra], log)
    out: dict[str, Any] = {}
    bias = eos_bias(path)
    with server:
        for n in streams:
            texts = [tokenizer.decode(p) for p in prompts(tokenizer, n, length)]

            async def run() -> Any:
                async with async_client(server.base_url, n) as client:
                    await concurrent_round(client, texts, tokens, bias)  # untimed: compiles this shape
                    return await concurrent_round(client, texts, tokens, bias)

            result = asyncio.run(run())
            ok = all(complete(r, tokens) for r in result.results)
            decode = [r.decode_tps for r in result.results]
            out[str(n)] = round(sum(decode), 1) if ok else f"failed: {result.results[0].error}"
        import httpx

        props = httpx.get(f"{server.base_url}/props", timeout=30).json()
        out["kv_cache"] = props.get("kv_cache")
        out["speculative"] = props.get("speculative")
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--preset", default="qwen3-0.6b")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--passthrough", type=int, default=28, help="do-nothing layers of the speculative target")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    streams = [int(s) for s in args.streams.split(",")]
    plain, target = checkpoints(args.out / "models", args.preset, args.dtype, args.passthrough)
    ctx = args.prompt + args.tokens + 64
    few = [s for s in streams if s <= 8]
    report: dict[str, Any] = {"preset": args.preset, "dtype": args.dtype, "tokens": args.tokens, "prompt": args.prompt}

    def section(name: str, fn: Any, *a: Any) -> None:
        t0 = time.perf_counter()
        try:
            report[name] = fn(*a)
        except Exception as exc:  # one failing section must not lose the others' figures
            report[name] = f"failed: {type(exc).__name__}: {exc}"
        print(f"{name}: {report[name]} ({time.perf_counter() - t0:.0f} s)", flush=True)
        (args.out / "bench_gpu.json").write_text(json.dumps(report, indent=1) + "\n")

    section("mlx_lm", raw_mlx_lm, plain, None, streams, args.tokens, args.prompt)
    section("mlxd", mlxd_http, plain, [], streams, args.tokens, args.prompt, args.out / "mlxd.log", ctx)
    section("mlxd_q8_0", mlxd_http, plain, ["-ctk", "q8_0", "-ctv", "q8_0"], few, args.tokens, args.prompt,
            args.out / "mlxd-q8.log", ctx)
    section("mlx_lm_target", raw_mlx_lm, target, None, [1], args.tokens, args.prompt)
    section("mlx_lm_target_draft", raw_mlx_lm, target, plain, [1], args.tokens, args.prompt)
    section("mlxd_target", mlxd_http, target, [], few, args.tokens, args.prompt, args.out / "mlxd-target.log", ctx)
    section("mlxd_target_draft", mlxd_http, target, ["-md", str(plain)], few, args.tokens, args.prompt,
            args.out / "mlxd-draft.log", ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
