"""Time to first token after a restart: the prompt cache's disk tier (``--cache-disk``) against a cold daemon and an
uninterrupted one (warm RAM).

    .venv/bin/python bench/bench_cache_disk.py CHECKPOINT [--lengths 2048,8192] [--repeat 3] [--out FILE.json]

For each prompt length, each turn: a fresh ``mlxd-server`` with ``--cache-disk`` (an empty directory), ``--parallel 1``
and a context of the length plus 256 tokens

- **cold**: a prompt it has never seen (the first request of the daemon);
- **warm RAM**: the same prompt again (the slot's own cache: one token to compute);
- SIGTERM: the drain writes the cache to the disk tier (its time from the daemon's log line);
- **disk**: a new daemon on the same directory, the same prompt (the entry read back, one token to compute); with
  ``--primer``, after a short unrelated prompt, so that it is not the process's first request;
- **cold, restarted**: on that daemon, another prompt of the same length, never seen (the cold time with the
  restarted process's state; ``--no-cold-restarted`` leaves it out, and cold / disk then uses the first cold).

Each figure is the wall time of a non-streamed ``/completion`` with ``n_predict`` 1 (the time to the first token and
the response), the median over ``--repeat`` turns; the daemon's own ``timings`` (``prompt_ms``, ``cache_n``) go to the
JSON. Also reported: the entry's size and the tier's read rate against the prompt rate, which is what the tier
decides by (engine.batching.prompt_cache.disk_worth). Writes a JSON document and prints a markdown table. Not part of the test
suite.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BIN, Prompts, Server  # noqa: E402

WRITTEN = re.compile(r"(\d+) entries written to the disk tier in ([\d.]+) s")
RESTORED = re.compile(r"(\d+) slot\(s\) restored from the disk tier in ([\d.]+) s")


def first_token(base_url: str, prompt: str) -> dict[str, Any]:
    """One greedy token for ``prompt``: wall seconds and the daemon's timings."""
    body = {"prompt": prompt, "n_predict": 1, "temperature": 0, "cache_prompt": True}
    t0 = time.perf_counter()
    r = httpx.post(f"{base_url}/completion", json=body, timeout=3600)
    wall = time.perf_counter() - t0
    r.raise_for_status()
    t = r.json()["timings"]
    return {"s": wall, "prompt_ms": t["prompt_ms"], "cache_n": t["cache_n"], "prompt_n": t["prompt_n"]}


def start(name: str, checkpoint: Path, cache: Path, ctx: int, work: Path) -> Server:
    argv = [str(BIN / "mlxd-server"), "-m", str(checkpoint), "--host", "127.0.0.1", "--port", "0",
            "--cache-disk", str(cache), "--parallel", "1", "-c", str(ctx), "--metrics"]
    server = Server(name, argv, work / f"{name}.log")
    server.start()
    return server


def stop(server: Server) -> float | None:
    """SIGTERM and wait; the seconds the drain spent writing the cache to disk (None if it wrote nothing)."""
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(600)
    match = WRITTEN.search(server.log())
    return float(match.group(2)) if match and int(match.group(1)) else None


def restored_s(server: Server) -> float | None:
    """The seconds a restarted daemon spent reading entries back into its slots before it reported ready."""
    match = RESTORED.search(server.log())
    return float(match.group(2)) if match else None


def turn(checkpoint: Path, prompts: Prompts, length: int, salt: int, work: Path,
         cold_restarted: bool = True, primer: bool = False) -> dict[str, Any]:
    cache = work / f"cache-{length}-{salt}"
    first = start("first", checkpoint, cache, length + 256, work)
    seen = prompts.text(length, f"seen-{salt}")
    out: dict[str, Any] = {"cold": first_token(first.base_url, seen), "warm": first_token(first.base_url, seen)}
    out["drain_write_s"] = stop(first)
    files = list(cache.glob("*.kv"))
    out["entry_bytes"] = sum(f.stat().st_size for f in files)
    second = start("second", checkpoint, cache, length + 256, work)
    out["restore_s"] = restored_s(second)
    try:
        if primer:  # a short unrelated prompt first, so that the disk figure is not the process's first request
            out["primer"] = first_token(second.base_url, prompts.text(16, f"primer-{salt}"))
        out["disk"] = first_token(second.base_url, seen)
        if cold_restarted:
            out["cold_restarted"] = first_token(second.base_url, prompts.text(length, f"unseen-{salt}"))
    finally:
        stop(second)
    for f in files:
        f.unlink(missing_ok=True)
    return out


def restarts(checkpoint: Path, prompts: Prompts, length: int, rounds: int, work: Path,
             primer: bool) -> list[dict[str, Any]]:
    """One cold prefill, then ``rounds`` restarts on its entry: each a new daemon on the same directory that takes
    the prompt from disk, then again from its slot (warm RAM), then SIGTERM. Disk and warm RAM figures alternate
    within each round, on one machine state, without paying the cold prefill again (on a loaded machine it is the
    longest part of a turn by far)."""
    cache = work / f"cache-{length}-reuse"
    first = start("first", checkpoint, cache, length + 256, work)
    seen = prompts.text(length, "seen-reuse")
    cold = first_token(first.base_url, seen)
    stop(first)
    out: list[dict[str, Any]] = []
    for i in range(rounds):
        server = start("again", checkpoint, cache, length + 256, work)
        try:
            got: dict[str, Any] = {"cold": cold, "restore_s": restored_s(server)}
            if primer:
                got["primer"] = first_token(server.base_url, prompts.text(16, f"primer-{i}"))
            got["disk"] = first_token(server.base_url, seen)
            got["warm"] = first_token(server.base_url, seen)
            got["entry_bytes"] = sum(f.stat().st_size for f in cache.glob("*.kv"))
        finally:
            got["drain_write_s"] = stop(server)
        out.append(got)
        print(f"{length} round {i}: disk {got['disk']['s']:.3f} s (cache_n {got['disk']['cache_n']}), "
              f"warm {got['warm']['s']:.3f} s", file=sys.stderr, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--lengths", default="2048,8192", help="prompt lengths in tokens")
    ap.add_argument("--repeat", type=int, default=3, help="turns per length (the median is reported)")
    ap.add_argument("--no-cold-restarted", action="store_true",
                    help="skip the second cold prompt (on a slow machine, the longest part of a turn)")
    ap.add_argument("--primer", action="store_true",
                    help="send the restarted daemon a short unrelated prompt before the cached one (the disk figure "
                         "then leaves out what a process's first request costs, as the warm RAM figure does)")
    ap.add_argument("--reuse", action="store_true",
                    help="one cold prefill per length, then --repeat restarts on its entry, each measuring disk and "
                         "warm RAM (see restarts())")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    prompts = Prompts(args.checkpoint)
    results: dict[str, Any] = {"checkpoint": str(args.checkpoint), "lengths": {}}
    with tempfile.TemporaryDirectory(prefix="mlxd-bench-disk-") as tmp:
        for length in [int(x) for x in args.lengths.split(",")]:
            if args.reuse:
                turns = restarts(args.checkpoint, prompts, length, args.repeat, Path(tmp), args.primer)
            else:
                turns = [turn(args.checkpoint, prompts, length, i, Path(tmp), not args.no_cold_restarted, args.primer)
                         for i in range(args.repeat)]
            med = {k: statistics.median(t[k]["s"] for t in turns) for k in ("cold", "warm", "disk", "cold_restarted")
                   if k in turns[0]}
            entry = statistics.median(t["entry_bytes"] for t in turns)
            # The two rates the tier compares: bytes read per second (an entry's size over the time the restarted
            # daemon took to read it back into its slot, else over the disk turn's prompt time, which is the read and
            # one token) and prompt tokens computed per second (cold).
            restores = [t["restore_s"] for t in turns if t.get("restore_s")]
            read_s = statistics.median(restores) if restores else \
                statistics.median(t["disk"]["prompt_ms"] for t in turns) / 1e3
            read_bps = entry / read_s
            prompt_tps = length / (statistics.median(t["cold"]["prompt_ms"] for t in turns) / 1e3)
            results["lengths"][str(length)] = {"turns": turns, "median_s": med, "entry_bytes": entry,
                                               "restore_s": statistics.median(restores) if restores else None,
                                               "read_bytes_per_s": read_bps, "prompt_tokens_per_s": prompt_tps}
            spread = {k: [round(min(t[k]["s"] for t in turns), 3), round(max(t[k]["s"] for t in turns), 3)]
                      for k in ("disk", "warm")}
            ratios = sorted(t["disk"]["s"] / t["warm"]["s"] for t in turns)
            results["lengths"][str(length)]["disk_over_warm_per_turn"] = ratios
            print(f"{length}: {json.dumps(med)} spread {json.dumps(spread)} disk/warm per turn "
                  f"{[round(r, 2) for r in ratios]}", file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    print("| prompt | cold | cold, restarted | disk tier after restart | warm RAM | cold / disk | disk / warm | entry "
          "| slot restore at start | read rate | prompt rate |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for length, r in results["lengths"].items():
        m = r["median_s"]
        restarted = m.get("cold_restarted")
        restore = f"{r['restore_s']:.3f} s" if r["restore_s"] else "-"
        print(f"| {length} | {m['cold']:.2f} s | {f'{restarted:.2f} s' if restarted else '-'} | {m['disk']:.3f} s "
              f"| {m['warm']:.3f} s | {(restarted or m['cold']) / m['disk']:.1f}x | {m['disk'] / m['warm']:.2f}x "
              f"| {r['entry_bytes'] / 2**20:.0f} MiB | {restore} "
              f"| {r['read_bytes_per_s'] / 1e6:.0f} MB/s "
              f"| {r['prompt_tokens_per_s']:.0f} tok/s |")


if __name__ == "__main__":
    main()
