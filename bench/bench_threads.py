"""Where a serving daemon's CPU goes, per thread, per token: ``python bench/bench_threads.py CHECKPOINT``.

    .venv/bin/python bench/bench_threads.py CHECKPOINT [--streams 32] [--rounds 6] [--processes 3]
        [--env NAME=VALUE]...

Starts ``mlxd-server`` on CHECKPOINT, runs one untimed round of ``--streams`` concurrent streamed completions of
``--tokens`` tokens (the raw client of bench_http), then ``--rounds`` timed rounds, and reads every thread's CPU time
from ``/proc`` before and after: microseconds of CPU per generated token for each thread of the daemon, and for the
client (this process). The threads are named by role: the event loop (the main thread), the model worker and its MLX
stream thread (the two threads pinned to one CPU by ``--worker-affinity auto``, the worker created first), and the
rest (OpenBLAS's helper threads, pools). ``--processes`` repeats all of it in fresh daemons, one after the other:
on a virtual machine the same code can cost very different amounts from one process to the next, and this shows by
how much. Linux only. Writes a JSON document and prints a markdown table. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_http import make_server  # noqa: E402
from bench.client import RawClient, complete, concurrent_round, eos_bias  # noqa: E402
from bench.common import Prompts  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user and system) of every thread of ``pid``."""
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def roles(pid: int, tids: list[int]) -> dict[int, str]:
    """Each thread's role: the event loop, the worker and its stream thread (pinned, in creation order), other."""
    pinned = sorted(t for t in tids if t != pid and _one_cpu(t))
    named = {pid: "event loop"}
    named.update(zip(pinned, ["model worker", "MLX stream thread"]))
    return {t: named.get(t, "other") for t in tids}


def _one_cpu(tid: int) -> bool:
    try:
        return len(os.sched_getaffinity(tid)) == 1
    except OSError:
        return False


async def measure(base_url: str, pid: int, prompts: list[str], tokens: int, rounds: int,
                  bias: dict[str, float]) -> dict[str, Any]:
    client = RawClient(base_url)
    await concurrent_round(client, prompts, tokens, bias)  # untimed: traces and buffers for these shapes
    before, own_before, started = thread_cpu(pid), os.times(), time.perf_counter()
    rates = []
    for _ in range(rounds):
        result = await concurrent_round(client, prompts, tokens, bias)
        failed = [r for r in result.results if not complete(r, tokens)]
        if failed:
            raise SystemExit(f"{len(failed)} requests failed or ended early: {failed[0]}")
        rates.append(result.aggregate_tps)
    wall, after, own_after = time.perf_counter() - started, thread_cpu(pid), os.times()
    generated = len(prompts) * tokens * rounds
    per_role: dict[str, float] = {}
    for tid, role in roles(pid, list(after)).items():
        per_role[role] = per_role.get(role, 0.0) + after[tid] - before.get(tid, 0.0)
    client_cpu = (own_after.user + own_after.system) - (own_before.user + own_before.system)
    per_role["client"] = client_cpu
    return {"aggregate_tps": round(statistics.median(rates)),
            "us_per_token": {role: round(s / generated * 1e6, 1) for role, s in per_role.items()},
            "cpu_share": {role: round(s / wall, 3) for role, s in per_role.items()}}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--processes", type=int, default=3, help="fresh daemons, one after the other")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the daemon (repeatable)")
    ap.add_argument("--out", type=Path, default=Path(".cache/bench-results/threads.json"))
    args = ap.parse_args(argv)
    prompts_of = Prompts(args.checkpoint)
    prompts = [prompts_of.text(args.prompt_tokens, salt=i) for i in range(args.streams)]
    bias = eos_bias(args.checkpoint)
    runs = []
    with tempfile.TemporaryDirectory(prefix="mlxd-bench-") as logs:
        for _ in range(args.processes):
            server, _ = make_server("mlxd", args.checkpoint, args.streams, args.prompt_tokens + args.tokens + 64,
                                    Path(logs))
            server.env.update(dict(e.split("=", 1) for e in args.env))
            server.start()
            try:
                assert server.process is not None
                runs.append(asyncio.run(measure(server.base_url, server.process.pid, prompts, args.tokens,
                                                args.rounds, bias)))
            finally:
                server.stop()
            print(json.dumps(runs[-1]), flush=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": " ".join(["python bench/bench_threads.py", *argv]), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    names = [r for r in ("event loop", "model worker", "MLX stream thread", "other", "client")
             if any(r in run["us_per_token"] for run in runs)]
    print(f"\n| process | aggregate tok/s | {' | '.join(n + ' us/token' for n in names)} |")
    print("|---|---|" + "---|" * len(names))
    for i, run in enumerate(runs, 1):
        cells = " | ".join(str(run["us_per_token"].get(n, "-")) for n in names)
        print(f"| {i} | {run['aggregate_tps']} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
