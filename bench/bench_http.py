"""mlxd-server against mlx_lm.server over HTTP: the same async client, prompts and token counts for both.

    .venv/bin/python bench/bench_http.py CHECKPOINT [--streams 1,4,8,16] [--tokens 128] [--prompt-tokens 16]
        [--rounds 2] [--repeat 3] [--servers mlxd,mlx_lm,mlx_lm+openblas] [--out FILE.json]

Each server is started alone (never two at once: they would share the cores), warmed up, measured, stopped; with
``--rounds`` > 1 the servers take turns again and each figure keeps its best round (best-of, against noise).
Every request is a streamed greedy ``/v1/completions`` whose end-of-generation tokens are banned by ``logit_bias``,
so that it runs to ``--tokens``; the token count is read from the stream's ``usage`` and checked.

Per server: one-stream decode tokens/s (first to last token; also as a ratio to ``mlx_lm.stream_generate``
in-process, run in its own process after each round), aggregate tokens/s and p50/p95 time to first token at
each ``--streams`` count, time to first token for a 1024-token prefix cold and cached (a second prompt with the same
prefix), peak RSS of the server process, and the BLAS it used. ``mlx_lm`` is mlx_lm.server as installed (mlx's
bundled BLAS); ``mlx_lm+openblas`` is the same with the system OpenBLAS in LD_PRELOAD, the library mlxd's
``--cpu-blas auto`` loads. mlx_lm.server's continuous batching is on (the default whenever no seed, KV
quantisation or draft model is given); its ``--decode-concurrency`` and ``--prompt-concurrency`` are set to the
largest stream count, as mlxd's ``--parallel`` is. Writes a JSON document and prints a markdown table. Not part of
the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.client import async_client, complete, concurrent_round, eos_bias, stream_completion  # noqa: E402
from bench.common import BIN, ROOT, Prompts, Server, free_port  # noqa: E402
from mlxd.engine.blas import find_openblas  # noqa: E402  (imports no mlx)

SERVERS = ("mlxd", "mlx_lm", "mlx_lm+openblas")

# The target's reference, in its own process between the servers' turns: bench_engine preloads OpenBLAS as mlxd does.
STREAM_GENERATE = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import bench_engine as e
loaded = e.load_model(Path(sys.argv[2]))
prompt = e.prompt_of(loaded, 16)
e.mlx_lm_one_stream(loaded, prompt, 16)
print(json.dumps(max(e.mlx_lm_one_stream(loaded, prompt, int(sys.argv[3]))[1] for _ in range(int(sys.argv[4])))))
"""


def stream_generate_tps(checkpoint: Path, tokens: int, repeat: int) -> float:
    """``mlx_lm.stream_generate``'s one-stream decode tokens/s, in-process, best of ``repeat``."""
    done = subprocess.run([sys.executable, "-c", STREAM_GENERATE, str(ROOT), str(checkpoint), str(tokens),
                           str(repeat)], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def make_server(kind: str, checkpoint: Path, streams: int, ctx_slot: int, log_dir: Path) -> tuple[Server, str]:
    """The server process for ``kind`` and a description of the BLAS it will use."""
    log = log_dir / f"{kind}.log"
    if kind == "mlxd":
        argv = [str(BIN / "mlxd-server"), "-m", str(checkpoint), "--host", "127.0.0.1", "--port", "0",
                "--parallel", str(streams), "--ctx-size", str(streams * ctx_slot), "--admin-listen", "off"]
        return Server(kind, argv, log), "from its startup log"
    port = free_port()
    argv = [sys.executable, "-m", "mlx_lm.server", "--model", str(checkpoint), "--host", "127.0.0.1",
            "--port", str(port), "--decode-concurrency", str(streams), "--prompt-concurrency", str(streams),
            "--log-level", "WARNING"]
    server = Server(kind, argv, log, base_url=f"http://127.0.0.1:{port}")
    if kind == "mlx_lm":
        return server, "mlx bundled BLAS (as installed; no preload)"
    library = find_openblas()
    if library is None:
        raise SystemExit("mlx_lm+openblas: no system OpenBLAS found")
    server.env["LD_PRELOAD"] = library
    return server, f"system OpenBLAS via LD_PRELOAD={library}"


async def measure(server: Server, args: argparse.Namespace, prompts: Prompts, bias: dict[str, float],
                  tag: str) -> dict[str, Any]:
    """All figures for one started server; every request is checked to have run to its ``max_tokens``."""
    streams = [int(s) for s in args.streams.split(",")]
    failures: list[str] = []

    def check(results: list[Any], max_tokens: int) -> None:
        for r in results:
            if not complete(r, max_tokens):
                failures.append(f"tokens={r.tokens}/{max_tokens} finish={r.finish_reason} error={r.error}")

    async with async_client(server.base_url, max(streams)) as client:
        # Warm-up: kernels, thread pools, the batch paths at the largest concurrency.
        check([await stream_completion(client, prompts.text(args.prompt_tokens, f"w{tag}"), 16, bias)], 16)
        warm = await concurrent_round(
            client, [prompts.text(args.prompt_tokens, f"w{tag}-{i}") for i in range(max(streams))], 8, bias)
        check(warm.results, 8)

        one = [await stream_completion(client, prompts.text(args.prompt_tokens, f"one{tag}-{i}"), args.tokens, bias)
               for i in range(args.repeat)]
        check(one, args.tokens)
        out: dict[str, Any] = {"one_stream_decode_tps": max(r.decode_tps for r in one),
                               "one_stream_ttft_s": min(r.ttft for r in one)}

        aggregate: dict[str, Any] = {}
        for n in streams:
            await concurrent_round(client, [prompts.text(args.prompt_tokens, f"w{tag}-{n}-{i}") for i in range(n)],
                                   8, bias)
            rounds = []
            for rep in range(args.repeat):
                batch = [prompts.text(args.prompt_tokens + i % 4, f"{tag}-{n}-{rep}-{i}") for i in range(n)]
                rounds.append(await concurrent_round(client, batch, args.tokens, bias))
                check(rounds[-1].results, args.tokens)
            aggregate[str(n)] = {"aggregate_tps": max(r.aggregate_tps for r in rounds),
                                 "ttft_p50_s": min(r.ttft(0.5) for r in rounds),
                                 "ttft_p95_s": min(r.ttft(0.95) for r in rounds),
                                 "failed": sum(not complete(x, args.tokens) for r in rounds for x in r.results)}
        out["aggregate"] = aggregate

        # A 1024-token prefix: cold (a prefix never seen), then cached (the same prefix, another suffix).
        cold = [await stream_completion(client, prompts.text(args.prefix, f"cold{tag}-{i}") + prompts.text(16, i),
                                        2, bias) for i in range(args.repeat)]
        shared = prompts.text(args.prefix, f"shared{tag}")
        first = await stream_completion(client, shared + prompts.text(16, "fill"), 2, bias)
        cached = [await stream_completion(client, shared + prompts.text(16, i), 2, bias) for i in range(args.repeat)]
        check(cold + [first] + cached, 2)
        out["prefix_ttft_s"] = {"tokens": prompts.count(shared), "cold": min(r.ttft for r in cold),
                                "cached": min(r.ttft for r in cached)}
    out["failures"] = failures
    return out


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's best value across rounds (highest throughput, lowest latency)."""
    top = dict(runs[0])
    top["one_stream_decode_tps"] = max(r["one_stream_decode_tps"] for r in runs)
    top["one_stream_ttft_s"] = min(r["one_stream_ttft_s"] for r in runs)
    top["aggregate"] = {
        n: {"aggregate_tps": max(r["aggregate"][n]["aggregate_tps"] for r in runs),
            "ttft_p50_s": min(r["aggregate"][n]["ttft_p50_s"] for r in runs),
            "ttft_p95_s": min(r["aggregate"][n]["ttft_p95_s"] for r in runs),
            "failed": sum(r["aggregate"][n]["failed"] for r in runs)}
        for n in runs[0]["aggregate"]
    }
    top["prefix_ttft_s"] = dict(runs[0]["prefix_ttft_s"],
                                cold=min(r["prefix_ttft_s"]["cold"] for r in runs),
                                cached=min(r["prefix_ttft_s"]["cached"] for r in runs))
    top["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
    top["failures"] = [f for r in runs for f in r["failures"]]
    top["rounds"] = len(runs)
    return top


def table(report: dict[str, Any]) -> str:
    """A markdown table of the figures, each with its ratio mlxd / the other server."""
    servers = report["servers"]
    others = [k for k in servers if k != "mlxd"]
    reference = report["stream_generate_decode_tps"]
    rows: list[tuple[str, Any]] = [("one-stream decode tok/s", lambda s: s["one_stream_decode_tps"]),
                                   (f"  / stream_generate in-process ({reference:.4g} tok/s)",
                                    lambda s: s["one_stream_decode_tps"] / reference)]
    for n in servers["mlxd"]["aggregate"]:
        rows += [(f"{n} streams: aggregate tok/s", lambda s, n=n: s["aggregate"][n]["aggregate_tps"]),
                 (f"{n} streams: TTFT p50 ms", lambda s, n=n: 1000 * s["aggregate"][n]["ttft_p50_s"]),
                 (f"{n} streams: TTFT p95 ms", lambda s, n=n: 1000 * s["aggregate"][n]["ttft_p95_s"]),
                 (f"{n} streams: failed requests", lambda s, n=n: s["aggregate"][n]["failed"])]
    prefix = servers["mlxd"]["prefix_ttft_s"]["tokens"]
    rows += [(f"{prefix}-token prefix TTFT cold ms", lambda s: 1000 * s["prefix_ttft_s"]["cold"]),
             (f"{prefix}-token prefix TTFT cached ms", lambda s: 1000 * s["prefix_ttft_s"]["cached"]),
             ("cached / cold", lambda s: s["prefix_ttft_s"]["cached"] / s["prefix_ttft_s"]["cold"]),
             ("peak RSS MiB", lambda s: s["peak_rss_mib"])]
    head = "| figure | mlxd | " + " | ".join(others) + " | " + " | ".join(f"mlxd / {k}" for k in others) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(others))]
    for label, get in rows:
        ours = get(servers["mlxd"])
        theirs = [get(servers[k]) for k in others]
        lines.append(f"| {label} | {ours:.4g} | " + " | ".join(f"{t:.4g}" for t in theirs) + " | "
                     + " | ".join(f"{ours / t:.2f}" if t and "failed" not in label and not label.startswith("  /") else "-" for t in theirs) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--tokens", type=int, default=128, help="tokens generated per request")
    ap.add_argument("--prompt-tokens", type=int, default=16, help="prompt length of the throughput requests")
    ap.add_argument("--prefix", type=int, default=1024, help="shared-prefix length for the cold/cached TTFT")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure within a round (the best is kept)")
    ap.add_argument("--rounds", type=int, default=1, help="turns each server takes (the best round is kept)")
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--out", type=Path, help="JSON output (default .cache/bench-results/http-NAME.json)")
    args = ap.parse_args(argv)
    checkpoint = args.checkpoint.resolve()
    kinds = args.servers.split(",")
    if kinds[0] != "mlxd" or any(k not in SERVERS for k in kinds):
        ap.error(f"--servers: mlxd first, then any of {', '.join(SERVERS[1:])}")
    max_streams = max(int(s) for s in args.streams.split(","))
    prompts = Prompts(checkpoint)
    bias = eos_bias(checkpoint)
    log_dir = Path(tempfile.mkdtemp(prefix="mlxd-bench-"))
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    blas_used: dict[str, str] = {}
    reference: list[float] = []
    for round_no in range(args.rounds):
        for kind in kinds:
            server, blas = make_server(kind, checkpoint, max_streams,
                                       args.prefix + 64 + args.prompt_tokens + args.tokens + 64, log_dir)
            t0 = time.perf_counter()
            with server:
                ready = time.perf_counter() - t0
                result = asyncio.run(measure(server, args, prompts, bias, tag=f"{round_no}"))
                result["peak_rss_mib"] = server.peak_rss_mib()
            if kind == "mlxd":
                blas = next((ln.split(": ", 1)[1] for ln in server.log().splitlines() if "cpu-blas" in ln), "?")
            blas_used[kind] = blas
            result["ready_s"] = ready
            runs[kind].append(result)
            print(f"round {round_no + 1}/{args.rounds} {kind}: done ({len(result['failures'])} failed requests)",
                  file=sys.stderr)
        reference.append(stream_generate_tps(checkpoint, args.tokens, args.repeat))
    report = {
        "checkpoint": str(args.checkpoint),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([Path(sys.argv[0]).as_posix(), *argv]),
        "tokens": args.tokens,
        "prompt_tokens": args.prompt_tokens,
        "repeat": args.repeat,
        "blas": blas_used,
        "stream_generate_decode_tps": max(reference),
        "servers": {k: best(v) for k, v in runs.items()},
    }
    out = args.out or Path(".cache/bench-results") / f"http-{checkpoint.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(table(report))
    print(f"\nJSON: {out}; server logs: {log_dir}")
    return 1 if report["servers"]["mlxd"]["failures"] else 0  # the other server's failures are its figures


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
