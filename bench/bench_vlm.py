"""Image requests over HTTP, mlxd against mlx_vlm.server on the same multimodal checkpoint, same client.

    .venv/bin/python bench/bench_vlm.py [--checkpoint DIR] [--repeat 5] [--streams 8] [--max-tokens 64]

Figures: time to first token of one streamed image chat request (a new image each time, so neither server's
prompt or vision cache answers it), and the aggregate decode rate of ``--streams`` concurrent image requests
(tokens received by all streams / wall time of the round). The synthetic checkpoint never emits an end token, so
every stream runs to ``max_tokens``. Medians of ``--repeat`` turns, the servers taking turns. mlxd loads the
system OpenBLAS (``--cpu-blas auto``); ``mlx_vlm.server`` runs as installed and, as ``mlx_vlm+openblas``, with the
same library in LD_PRELOAD and the same idle-thread timeout (as bench_http.py does for mlx_lm.server).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import BIN, PAUSE_S, Server, free_port  # noqa: E402
from mlxd.engine.cpu.blas import THREAD_TIMEOUT, find_openblas  # noqa: E402  (imports no mlx)


def png(seed: int, size: tuple[int, int] = (112, 112)) -> str:
    import numpy as np
    from PIL import Image

    pixels = (np.random.RandomState(seed).rand(size[1], size[0], 3) * 255).astype("uint8")
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


async def stream_one(client: httpx.AsyncClient, model: str, image: str, max_tokens: int) -> tuple[float, int]:
    """(seconds to the first content token, content chunks received) of one streamed image chat request."""
    body = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Describe the image."},
                                                      {"type": "image_url", "image_url": {"url": image}}]}]}
    start = time.perf_counter()
    first, n = 0.0, 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    n += 1
                    first = first or time.perf_counter() - start
    return first, n


async def measure(base_url: str, model: str, seed: int, streams: int, max_tokens: int) -> tuple[float, float]:
    """(TTFT of one image request, aggregate tokens/s of ``streams`` concurrent image requests)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=300,
                                 limits=httpx.Limits(max_connections=streams + 1)) as client:
        ttft, _ = await stream_one(client, model, png(seed), 8)
        await asyncio.sleep(PAUSE_S)
        start = time.perf_counter()
        results = await asyncio.gather(*[stream_one(client, model, png(seed * 100 + i + 1), max_tokens)
                                         for i in range(streams)])
        wall = time.perf_counter() - start
    return ttft, sum(n for _, n in results) / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    checkpoint = args.checkpoint
    if checkpoint is None:
        from tests.conftest import synthetic_checkpoint

        checkpoint = synthetic_checkpoint("qwen2-vl-tiny")
    logs = Path("/tmp")
    library = find_openblas()
    vlm_argv = [sys.executable, "-m", "mlx_vlm.server", "--model", str(checkpoint), "--host", "127.0.0.1",
                "--max-num-seqs", str(args.streams), "--log-level", "WARNING"]
    servers = [
        ("mlxd", Server("mlxd", [str(BIN / "mlxd-server"), "-m", str(checkpoint), "--host", "127.0.0.1", "--port",
                                 "0", "-np", str(args.streams), "--admin-listen", "off", "--no-warmup"],
                        logs / "bench_vlm_mlxd.log")),
    ]
    for name, env in [("mlx_vlm.server", {}), ("mlx_vlm+openblas", {"LD_PRELOAD": library or "",
                                                                   "OPENBLAS_THREAD_TIMEOUT": str(THREAD_TIMEOUT)})]:
        if name.endswith("openblas") and library is None:
            continue
        port = free_port()
        server = Server(name, [*vlm_argv, "--port", str(port)], logs / f"bench_vlm_{name}.log", env=env)
        server.base_url = f"http://127.0.0.1:{port}"
        servers.append((name, server))
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in servers}
    try:
        for _, server in servers:
            server.start()
        for turn in range(args.repeat + 1):  # turn 0 warms both up and is not counted
            for name, server in servers:
                result = asyncio.run(measure(server.base_url, str(checkpoint), turn + 1, args.streams,
                                             args.max_tokens))
                if turn:
                    figures[name].append(result)
                time.sleep(PAUSE_S)
    finally:
        for _, server in servers:
            server.stop()
    print(f"checkpoint {checkpoint.name}, {args.streams} streams x {args.max_tokens} tokens, 112x112 images, "
          f"median of {args.repeat}")
    print(f"{'server':16} {'TTFT ms':>9} {f'{args.streams}-stream tok/s':>18}")
    for name, rows in figures.items():
        ttft = statistics.median(r[0] for r in rows) * 1e3
        tps = statistics.median(r[1] for r in rows)
        print(f"{name:16} {ttft:9.1f} {tps:18.1f}")


if __name__ == "__main__":
    main()
