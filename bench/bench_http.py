"""mlxd-server against mlx_lm.server over HTTP: the same async client, prompts and token counts for both.

    .venv/bin/python bench/bench_http.py CHECKPOINT [--streams 1,4,8,16] [--tokens 128] [--prompt-tokens 16]
        [--repeat 5] [--servers mlxd,mlx_lm,mlx_lm+openblas] [--out FILE.json]

All servers are started together (an idle server costs no CPU) and take turns, figure by figure: each of the
``--repeat`` turns of a figure runs once on every server in a row, so that every server meets the same moment's
load on a shared machine. Each figure is reported as the median of its turns (and its best, in the JSON); a ratio is
the ratio of two medians, and the one-stream figure is also compared turn by turn with ``mlx_lm.stream_generate``
in its own process, which takes its turn right after the servers'. The decode rates are also compared turn by turn
between servers (the rows ending in "turn by turn": the median of each turn's ratio), which cancels the drift of a
machine whose turns move by 2x.
The requests of a concurrent round start ``--stagger-ms`` apart (2 ms): mlx_lm.server listens with Python's
default backlog of 5 and opens a connection per request (HTTP/1.0), so that connections made all at once beyond
the fifth wait for a SYN retransmit (1 s) and would measure its listen queue rather than its batching; ``0``
sends them all at once. Time to first token counts from each request's own start.
Every request is a streamed greedy ``/v1/completions`` whose end-of-generation tokens are banned by ``logit_bias``,
so that it runs to ``--tokens``; the token count is read from the stream's ``usage`` and checked.

Per server: one-stream decode tokens/s (first to last token), aggregate tokens/s and p50/p95 time to first token
at each ``--streams`` count, time to first token for a 1024-token prefix cold and cached (a second prompt with the
same prefix), peak RSS of the server process, and the BLAS it used. ``mlx_lm`` is mlx_lm.server as installed
(mlx's bundled BLAS); ``mlx_lm+openblas`` is the same with an OpenBLAS in LD_PRELOAD, the library mlxd's
``--cpu-blas auto`` loads (the packaged one unless the system's is newer), with the same idle-thread timeout mlxd gives it (``OPENBLAS_THREAD_TIMEOUT``, see
``mlxd.engine.cpu.blas``); ``mlxd+affinity-off`` is mlxd with ``--worker-affinity off``, and ``mlxd+env:NAME=VALUE``
is mlxd with one more environment variable (``mlxd+env:OPENBLAS_THREAD_TIMEOUT=28``: OpenBLAS's own), and
``mlxd@REV`` is mlxd as of git revision REV of this checkout (its ``mlxd/`` unpacked by ``git archive``, run with
this venv), for a before/after in one run; each mlxd variant also gets its own ratio to llama-server. mlx_lm.server's
continuous batching is on (the default whenever no seed, KV quantisation or draft model is given); its
``--decode-concurrency`` and ``--prompt-concurrency`` are set to the largest stream count, as mlxd's
``--parallel`` is. Writes a JSON document and prints a markdown table. Not part of
the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.client import RawClient, async_client, complete, concurrent_round, eos_bias, stream_completion  # noqa: E402
from bench.common import BIN, PAUSE_S, ROOT, Prompts, ScriptProcess, Server, free_port  # noqa: E402

Client = httpx.AsyncClient | RawClient
from mlxd.engine.cpu.blas import THREAD_TIMEOUT  # noqa: E402  (imports no mlx)
from mlxd.engine.cpu.blas_libs import choose, packaged_library, system_library  # noqa: E402

SERVERS = ("mlxd", "mlxd+affinity-off", "mlx_lm", "mlx_lm+openblas", "llama-server")
# b10621's llama-server (../shared/tools/llama-ref.sh builds it); it serves CHECKPOINT.gguf, the same model in GGUF
# (../shared/fixtures/tiny-llama and tiny-llama.gguf).
LLAMA_SERVER = Path.home() / ".cache/llama-ref/build/bin/llama-server"
ENV_KIND = "mlxd+env:"  # mlxd-server with one more environment variable: mlxd+env:NAME=VALUE
REV_KIND = "mlxd@"  # mlxd-server as of a git revision of this checkout (same venv): mlxd@REV, for a before/after

# The one-stream reference in a process of its own that stays up between turns, one line in (tokens) and one out
# (decode tokens/s); bench_engine preloads OpenBLAS as mlxd does.
STREAM_GENERATE = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import bench_engine as e
loaded = e.load_model(Path(sys.argv[2]))
prompt = e.prompt_of(loaded, 16)
e.mlx_lm_one_stream(loaded, prompt, 16)
print("ready", flush=True)
for line in sys.stdin:
    print(json.dumps(e.mlx_lm_one_stream(loaded, prompt, int(line))[1]), flush=True)
"""

class Reference(ScriptProcess):
    """``mlx_lm.stream_generate``'s one-stream decode tokens/s, in-process in its own long-lived process."""

    def __init__(self, checkpoint: Path) -> None:
        super().__init__(STREAM_GENERATE, str(ROOT), str(checkpoint), what="the stream_generate reference")

    def decode_tps(self, tokens: int) -> float:
        return float(self.ask(str(tokens)))


def make_server(kind: str, checkpoint: Path, streams: int, ctx_slot: int, log_dir: Path) -> tuple[Server, str]:
    """The server process for ``kind`` and a description of the BLAS it will use."""
    log = log_dir / f"{re.sub(r'[^A-Za-z0-9+_.-]', '_', kind)}.log"
    if kind.startswith("mlxd"):
        argv = [str(BIN / "mlxd-server"), "-m", str(checkpoint), "--host", "127.0.0.1", "--port", "0",
                "--parallel", str(streams), "--ctx-size", str(streams * ctx_slot), "--admin-listen", "off"]
        if kind == "mlxd+affinity-off":  # the worker's threads left to the kernel's placement
            argv += ["--worker-affinity", "off"]
        if kind.startswith(REV_KIND):
            argv[:1] = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
                        "from mlxd.daemon.cli import server_main; server_main()", str(source_tree(kind, log_dir))]
        server = Server(kind, argv, log)
        if kind.startswith(ENV_KIND):
            name, value = kind[len(ENV_KIND):].split("=", 1)
            server.env[name] = value
        return server, "from its startup log"
    port = free_port()
    if kind == "llama-server":
        gguf = checkpoint.with_name(checkpoint.name + ".gguf")
        argv = [str(LLAMA_SERVER), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-np", str(streams),
                "-c", str(streams * ctx_slot)]
        return Server(kind, argv, log, base_url=f"http://127.0.0.1:{port}"), "ggml's own CPU kernels"
    argv = [sys.executable, "-m", "mlx_lm.server", "--model", str(checkpoint), "--host", "127.0.0.1",
            "--port", str(port), "--decode-concurrency", str(streams), "--prompt-concurrency", str(streams),
            "--log-level", "WARNING"]
    server = Server(kind, argv, log, base_url=f"http://127.0.0.1:{port}")
    if kind == "mlx_lm":
        return server, "mlx bundled BLAS (as installed; no preload)"
    # The library mlxd's --cpu-blas auto takes (the packaged OpenBLAS unless the system's is newer).
    library, _ = choose(system_library(), packaged_library())
    if library is None:
        raise SystemExit("mlx_lm+openblas: no OpenBLAS found (neither ngsolve-openblas nor a system library)")
    server.env["LD_PRELOAD"] = library.path
    server.env["OPENBLAS_THREAD_TIMEOUT"] = str(THREAD_TIMEOUT)
    return server, f"{library.source} OpenBLAS via LD_PRELOAD={library.path}, " \
                   f"OPENBLAS_THREAD_TIMEOUT={THREAD_TIMEOUT}"


def source_tree(kind: str, log_dir: Path) -> Path:
    """The mlxd package of revision REV (``mlxd@REV``), unpacked from this checkout's git history."""
    rev = kind[len(REV_KIND):]
    tree = log_dir / ("src-" + re.sub(r"[^A-Za-z0-9_.-]", "_", rev))
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "mlxd"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def summary(turns: list[float], higher_is_better: bool) -> dict[str, Any]:
    """A figure over its turns: the median (what the tables quote), the best and every turn."""
    return {"median": statistics.median(turns), "best": max(turns) if higher_is_better else min(turns),
            "turns": turns}


class Turns:
    """Every figure's turns for every server, and the requests that did not run to their ``max_tokens``."""

    def __init__(self, kinds: list[str], streams: list[int]) -> None:
        self.one: dict[str, list[Any]] = {k: [] for k in kinds}
        self.reference: list[float] = []
        self.rounds: dict[str, dict[int, list[Any]]] = {k: {n: [] for n in streams} for k in kinds}
        self.cold: dict[str, list[Any]] = {k: [] for k in kinds}
        self.cached: dict[str, list[Any]] = {k: [] for k in kinds}
        self.failures: dict[str, list[str]] = {k: [] for k in kinds}
        self.prefix_tokens = 0

    def check(self, kind: str, results: list[Any], max_tokens: int) -> None:
        for r in results:
            if not complete(r, max_tokens):
                self.failures[kind].append(f"tokens={r.tokens}/{max_tokens} finish={r.finish_reason} error={r.error}")


async def measure(clients: dict[str, Client], reference: Reference, args: argparse.Namespace,
                  prompts: Prompts, bias: dict[str, float]) -> Turns:
    """Every figure, each turn of it taken by every server in a row (and by the reference, for one stream)."""
    streams = [int(s) for s in args.streams.split(",")]
    turns = Turns(list(clients), streams)
    text, n_prompt = prompts.text, args.prompt_tokens

    async def each(make: Any) -> None:
        for kind, client in clients.items():
            await make(kind, client)
            await asyncio.sleep(PAUSE_S)

    async def warm(kind: str, client: Client) -> None:  # kernels, thread pools, the largest batch
        turns.check(kind, [await stream_completion(client, text(n_prompt, "w"), 16, bias)], 16)
        warm_round = await concurrent_round(client, [text(n_prompt, f"w-{i}") for i in range(max(streams))], 8, bias,
                                            args.stagger_ms / 1000)
        turns.check(kind, warm_round.results, 8)

    await each(warm)
    for rep in range(args.repeat):
        async def one(kind: str, client: Client, rep: int = rep) -> None:
            result = await stream_completion(client, text(n_prompt, f"one-{rep}"), args.tokens, bias)
            turns.check(kind, [result], args.tokens)
            turns.one[kind].append(result)

        await each(one)
        turns.reference.append(await asyncio.to_thread(reference.decode_tps, args.tokens))
        await asyncio.sleep(PAUSE_S)

    for n in streams:
        async def warm_n(kind: str, client: Client, n: int = n) -> None:
            await concurrent_round(client, [text(n_prompt, f"w-{n}-{i}") for i in range(n)], 8, bias,
                                   args.stagger_ms / 1000)

        await each(warm_n)
        for rep in range(args.repeat):
            async def round_n(kind: str, client: Client, n: int = n, rep: int = rep) -> None:
                batch = [text(n_prompt + i % 4, f"{n}-{rep}-{i}") for i in range(n)]
                result = await concurrent_round(client, batch, args.tokens, bias, args.stagger_ms / 1000)
                turns.check(kind, result.results, args.tokens)
                turns.rounds[kind][n].append(result)

            await each(round_n)

    # A long prefix: cold (a prefix never seen), then cached (the same prefix after a first request, another suffix).
    shared = text(args.prefix, "shared")
    for rep in range(args.repeat):
        async def cold(kind: str, client: Client, rep: int = rep) -> None:
            result = await stream_completion(client, text(args.prefix, f"cold-{rep}") + text(16, rep), 2, bias)
            turns.check(kind, [result], 2)
            turns.cold[kind].append(result)

        await each(cold)

    async def first(kind: str, client: Client) -> None:
        turns.check(kind, [await stream_completion(client, shared + text(16, "fill"), 2, bias)], 2)

    await each(first)
    for rep in range(args.repeat):
        async def cached(kind: str, client: Client, rep: int = rep) -> None:
            result = await stream_completion(client, shared + text(16, rep), 2, bias)
            turns.check(kind, [result], 2)
            turns.cached[kind].append(result)

        await each(cached)
    turns.prefix_tokens = prompts.count(shared)
    return turns


def figures(turns: Turns, kind: str, tokens: int) -> dict[str, Any]:
    """One server's figures from its turns."""
    one = turns.one[kind]
    return {
        "one_stream_decode_tps": summary([r.decode_tps for r in one], True),
        "one_stream_ttft_s": summary([r.ttft for r in one], False),
        "one_stream_over_stream_generate": summary([r.decode_tps / ref for r, ref in zip(one, turns.reference)], True),
        "aggregate": {
            str(n): {"aggregate_tps": summary([r.aggregate_tps for r in rounds], True),
                     "ttft_p50_s": summary([r.ttft(0.5) for r in rounds], False),
                     "ttft_p95_s": summary([r.ttft(0.95) for r in rounds], False),
                     "failed": sum(not complete(x, tokens) for r in rounds for x in r.results)}
            for n, rounds in turns.rounds[kind].items()
        },
        "prefix_ttft_s": {"tokens": turns.prefix_tokens,
                          "cold": summary([r.ttft for r in turns.cold[kind]], False),
                          "cached": summary([r.ttft for r in turns.cached[kind]], False)},
        "failures": turns.failures[kind],
    }


def table(report: dict[str, Any]) -> str:
    """A markdown table of the medians, each with its ratio mlxd / the other server."""
    servers = report["servers"]
    others = [k for k in servers if k != "mlxd"]
    reference = report["stream_generate_decode_tps"]["median"]
    rows: list[tuple[str, Any]] = [
        ("one-stream decode tok/s", lambda s: s["one_stream_decode_tps"]["median"]),
        (f"  / stream_generate in-process, turn by turn (its median {reference:.4g} tok/s)",
         lambda s: s["one_stream_over_stream_generate"]["median"]),
    ]
    # Servers take turns, so the ratio of one turn's figures cancels the machine's drift between turns; its median
    # is the steadier comparison where turns move by 2x (rows ending in "turn by turn": ratios only).
    turn_rows: dict[str, Any] = {"one-stream decode, turn by turn": lambda s: s["one_stream_decode_tps"]["turns"]}
    for n in servers["mlxd"]["aggregate"]:
        turn_rows[f"{n} streams: aggregate, turn by turn"] = lambda s, n=n: s["aggregate"][n]["aggregate_tps"]["turns"]
        rows += [(f"{n} streams: aggregate tok/s", lambda s, n=n: s["aggregate"][n]["aggregate_tps"]["median"]),
                 (f"{n} streams: TTFT p50 ms", lambda s, n=n: 1000 * s["aggregate"][n]["ttft_p50_s"]["median"]),
                 (f"{n} streams: TTFT p95 ms", lambda s, n=n: 1000 * s["aggregate"][n]["ttft_p95_s"]["median"]),
                 (f"{n} streams: failed requests", lambda s, n=n: s["aggregate"][n]["failed"])]
    prefix = servers["mlxd"]["prefix_ttft_s"]["tokens"]
    rows += [(f"{prefix}-token prefix TTFT cold ms", lambda s: 1000 * s["prefix_ttft_s"]["cold"]["median"]),
             (f"{prefix}-token prefix TTFT cached ms", lambda s: 1000 * s["prefix_ttft_s"]["cached"]["median"]),
             ("cached / cold", lambda s: s["prefix_ttft_s"]["cached"]["median"] / s["prefix_ttft_s"]["cold"]["median"]
              if s["prefix_ttft_s"]["cold"]["median"] else float("nan")),  # a server that never answered it
             ("peak RSS MiB", lambda s: s["peak_rss_mib"])]
    # Other mlxd variants (mlxd@REV: a before/after) also get their own ratio to llama-server, side by side.
    pairs = [("mlxd", k) for k in others] + [
        (k, "llama-server") for k in others if k.startswith("mlxd") and "llama-server" in servers]
    head = "| figure (median of turns) | mlxd | " + " | ".join(others) + " | " + " | ".join(
        f"{a} / {b}" for a, b in pairs) + " |"
    lines = [head, "|" + "---|" * (2 + len(others) + len(pairs))]
    for label, get in rows:
        ours = get(servers["mlxd"])
        theirs = [get(servers[k]) for k in others]
        plain = "failed" not in label and not label.startswith("  /")
        ratios = [(get(servers[a]), get(servers[b])) for a, b in pairs]
        lines.append(f"| {label} | {ours:.4g} | " + " | ".join(f"{t:.4g}" for t in theirs) + " | "
                     + " | ".join(f"{x / y:.2f}" if y and plain else "-" for x, y in ratios) + " |")
    for label, turns in turn_rows.items():
        cells = []
        for a, b in pairs:
            xs, ys = turns(servers[a]), turns(servers[b])
            per_turn = [x / y for x, y in zip(xs, ys) if y] if len(xs) == len(ys) else []  # 0: a figure it never gave
            cells.append(f"{statistics.median(per_turn):.2f}" if per_turn else "-")
        lines.append(f"| {label} | - | " + " | ".join("-" for _ in others) + " | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--tokens", type=int, default=128, help="tokens generated per request")
    ap.add_argument("--prompt-tokens", type=int, default=16, help="prompt length of the throughput requests")
    ap.add_argument("--prefix", type=int, default=1024, help="shared-prefix length for the cold/cached TTFT")
    ap.add_argument("--repeat", type=int, default=5, help="turns per figure, every server in a row each time")
    ap.add_argument("--stagger-ms", type=float, default=2.0,
                    help="gap between the starts of a round's requests (0: all at once); see the module docstring")
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--client", choices=("httpx", "raw"), default="httpx",
                    help="the transport every server is read with (bench/client.py): httpx, or the raw asyncio "
                         "client, whose own cost per chunk is a fraction of httpx's")
    ap.add_argument("--out", type=Path, help="JSON output (default .cache/bench-results/http-NAME.json)")
    args = ap.parse_args(argv)
    checkpoint = args.checkpoint.resolve()
    kinds = args.servers.split(",")
    env_kind = re.compile(re.escape(ENV_KIND) + r"\w+=.*|" + re.escape(REV_KIND) + r"[\w.^~/-]+")
    if kinds[0] != "mlxd" or any(k not in SERVERS and not env_kind.fullmatch(k) for k in kinds):
        ap.error(f"--servers: mlxd first, then any of {', '.join(SERVERS[1:])}, {ENV_KIND}NAME=VALUE or "
                 f"{REV_KIND}REV")
    max_streams = max(int(s) for s in args.streams.split(","))
    prompts = Prompts(checkpoint)
    bias = eos_bias(checkpoint)
    log_dir = Path(tempfile.mkdtemp(prefix="mlxd-bench-"))
    ctx_slot = args.prefix + 64 + args.prompt_tokens + args.tokens + 64
    with ExitStack() as stack:
        servers: dict[str, Server] = {}
        blas_used: dict[str, str] = {}
        ready_s: dict[str, float] = {}
        for kind in kinds:
            server, blas_used[kind] = make_server(kind, checkpoint, max_streams, ctx_slot, log_dir)
            t0 = time.perf_counter()
            servers[kind] = stack.enter_context(server)
            ready_s[kind] = time.perf_counter() - t0
        reference = Reference(checkpoint)
        stack.callback(reference.close)

        async def run() -> Turns:
            async with AsyncExitStack() as clients_stack:
                clients = {k: await clients_stack.enter_async_context(
                               async_client(s.base_url, max_streams, raw=args.client == "raw"))
                           for k, s in servers.items()}
                return await measure(clients, reference, args, prompts, bias)

        turns = asyncio.run(run())
        for kind in (k for k in servers if k.startswith("mlxd")):
            blas_used[kind] = next((ln.split(": ", 1)[1] for ln in servers[kind].log().splitlines()
                                    if "cpu-blas" in ln), "?")
        results = {k: dict(figures(turns, k, args.tokens), peak_rss_mib=s.peak_rss_mib(), ready_s=ready_s[k])
                   for k, s in servers.items()}
    report = {
        "checkpoint": str(args.checkpoint),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([Path(sys.argv[0]).as_posix(), *argv]),
        "tokens": args.tokens,
        "prompt_tokens": args.prompt_tokens,
        "repeat": args.repeat,
        "stagger_ms": args.stagger_ms,
        "client": args.client,
        "blas": blas_used,
        "stream_generate_decode_tps": summary(turns.reference, True),
        "servers": results,
    }
    out = args.out or Path(".cache/bench-results") / f"http-{checkpoint.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(table(report))
    print(f"\nJSON: {out}; server logs: {log_dir}")
    return 1 if report["servers"]["mlxd"]["failures"] else 0  # the other server's failures are its figures


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
