"""mlx-lm's own generation on each BLAS ``--cpu-blas`` can load, in fresh processes taking turns:
``python bench/bench_blas.py CHECKPOINT [--modes packaged,system] [--prompt-tokens 443] [--tokens 24] [--repeat 3]``;
a mode may name an OpenBLAS thread count (``packaged:1``, as ``-t 1`` does), and ``/sgemm`` leaves one-row products
to sgemm (``--cpu-gemv off``: ``packaged:1/sgemm``).

Each turn runs every mode once, in a row, each in a new process that preloads its BLAS as the daemon does
(mlxd.engine.cpu.blas), loads CHECKPOINT and runs ``mlx_lm.stream_generate`` greedily once untimed (warm-up) and once
timed: prefill tokens/s of a ``--prompt-tokens`` prompt and decode tokens/s of ``--tokens`` tokens, as mlx-lm reports
them, with the library's version and kernels, and whether every turn of every mode drew the same greedy tokens.
Medians of the turns. Prints one JSON document. Not part of the test
suite.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ONE = """
import json, sys
from mlxd.engine.cpu import blas
spec, _, gemv = sys.argv[1].partition("/")
mode, _, threads = spec.partition(":")
report = blas.preload(mode, threads=int(threads) if threads else None, gemv="off" if gemv == "sgemm" else "auto")
from mlx_lm import stream_generate
from mlxd.engine.loading.loader import load_model
loaded = load_model(sys.argv[2])
n_prompt, n_tokens = int(sys.argv[3]), int(sys.argv[4])
ids = [t % (loaded.vocab_size - 300) + 256 for t in range(7, 7 + 13 * n_prompt, 13)][:n_prompt]
for _ in range(2):
    last, tokens = None, []
    for last in stream_generate(loaded.model, loaded.tokenizer, ids, max_tokens=n_tokens):
        tokens.append(last.token)
print(json.dumps({"prefill": last.prompt_tps, "decode": last.generation_tps, "blas": report.summary(),
                  "tokens": tokens}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--modes", default="packaged,system")
    ap.add_argument("--prompt-tokens", type=int, default=443)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    modes = a.modes.split(",")
    runs: dict[str, list[dict[str, float | str]]] = {m: [] for m in modes}
    for _ in range(a.repeat):
        for mode in modes:
            out = subprocess.run([sys.executable, "-c", ONE, mode, str(a.checkpoint), str(a.prompt_tokens),
                                  str(a.tokens)], cwd=ROOT, capture_output=True, text=True, check=True)
            runs[mode].append(json.loads(out.stdout.splitlines()[-1]))
    result = {m: {"blas": r[0]["blas"],
                  "prefill_tok_s": statistics.median(float(x["prefill"]) for x in r),
                  "decode_tok_s": statistics.median(float(x["decode"]) for x in r),
                  "turns": r} for m, r in runs.items()}
    greedy = {json.dumps(t["tokens"]) for r in runs.values() for t in r}
    print(json.dumps({"checkpoint": str(a.checkpoint), "prompt_tokens": a.prompt_tokens, "tokens": a.tokens,
                      "repeat": a.repeat, "same_greedy_tokens": len(greedy) == 1, "modes": result}, indent=1))


if __name__ == "__main__":
    main()
