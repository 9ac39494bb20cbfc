"""Where a decode step and a prompt pass of a compute-bound model go, in-process: ``python bench/bench_mid_step.py
CHECKPOINT [--rows 1,8] [--prompt-tokens 443] [--repeat 5] [--threads 1,2]`` (``MLXD_CPU_JIT=off``: mlx's kernels and
attention as mlx builds them, where the daemon has its ``--cpu-jit auto``).

With OpenBLAS loaded as the daemon loads it (``--cpu-blas auto``), on the calling thread, for each OpenBLAS thread
count (set between turns with ``openblas_set_num_threads``, the counts taking turns so that a shared machine's load
falls on each alike), in milliseconds, medians of ``--repeat`` turns:

- ``step``: one decode step of the model's forward pass for ``--rows`` rows (mlx-lm's model, a cache holding
  ``--prompt-tokens`` tokens, evaluated with the argmax of its logits);
- ``products``: the same step's matrix products alone (every linear layer's ``x @ W.T`` for those rows, in one
  evaluation); ``step - products`` is the step's work outside them (norms, rope, attention, the sampler's argmax,
  mlx's per-operation cost);
- ``sgemm`` and ``sgemv``: one row by the largest weight through ``cblas_sgemm`` and ``cblas_sgemv`` directly
  (mlx calls sgemm for every product; OpenBLAS may or may not forward a one-row sgemm to its gemv kernel);
- ``prefill``: one prompt pass of ``--prompt-tokens`` tokens, and ``prefill_products`` its matrix products alone;
- ``prefill_exp`` and ``prefill_sigmoid``: the two elementwise functions of a prompt pass that mlx's CPU backend
  computes one element at a time, over the pass's shapes for every layer: the softmax's exponentials of causal
  attention (heads x tokens x tokens) and the MLP's SiLU (tokens x intermediate);
- ``prefill_swiglu``: mlx-lm's SwiGLU over the same shapes, which ``mx.compile`` makes one of the kernels that
  ``--cpu-jit`` builds (``MLXD_CPU_JIT=off``: as mlx builds them).

Prints one JSON document. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlxd.engine.cpu import blas, jit  # noqa: E402  (before mlx is imported)

# As the daemon does: mlx's fused kernels built for this CPU and attention's softmax fused (MLXD_CPU_JIT=off: not).
JIT = jit.prepare("off" if os.environ.get("MLXD_CPU_JIT") == "off" else "auto")
REPORT = blas.preload("auto")
if JIT.directory is not None:
    from mlxd.engine.cpu import attention  # noqa: E402

    attention.install()

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx_lm.models.activations import swiglu  # noqa: E402
from mlx_lm.models.cache import make_prompt_cache  # noqa: E402

from mlxd.engine.loading.loader import load_model  # noqa: E402


def timed(fn: Callable[[], Any], n: int = 1) -> float:
    """Milliseconds per call of ``fn`` over ``n`` calls, after one untimed call."""
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) * 1e3 / n


def linear_weights(model: Any) -> list[mx.array]:
    """Every weight matrix a forward pass multiplies by (the layers' linears and the output head)."""
    out: list[mx.array] = []
    for name, w in model.parameters_flat() if hasattr(model, "parameters_flat") else _flat(model.parameters()):
        if w.ndim == 2 and "embed" not in name and "norm" not in name:
            out.append(w)
    if not any(w.shape[0] > 256 and w.shape[0] == model.args.vocab_size for w in out):
        out.append(model.model.embed_tokens.weight)  # tied output head
    return out


def _flat(tree: Any, prefix: str = "") -> list[tuple[str, mx.array]]:
    if isinstance(tree, mx.array):
        return [(prefix, tree)]
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    out: list[tuple[str, mx.array]] = []
    for k, v in items:
        out += _flat(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--prompt-tokens", type=int, default=443)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=8, help="decode steps per timed figure")
    a = ap.parse_args()
    lib = ctypes.CDLL(REPORT.library) if REPORT.library else None
    if lib is None:
        sys.exit("no OpenBLAS loaded")
    lib.openblas_set_num_threads.argtypes = [ctypes.c_int]
    lib.openblas_get_num_threads.restype = ctypes.c_int
    loaded = load_model(str(a.checkpoint))
    model = loaded.model
    weights = linear_weights(model)
    n_prompt = a.prompt_tokens
    vocab = loaded.vocab_size
    prompt = mx.array([[t % (vocab - 300) + 256 for t in range(7, 7 + 13 * n_prompt, 13)][:n_prompt]])
    rows = [int(r) for r in a.rows.split(",")]
    threads = [int(t) for t in a.threads.split(",")]

    caches: dict[int, list[Any]] = {}
    for b in rows:
        cache = make_prompt_cache(model)
        mx.eval(model(mx.repeat(prompt, b, axis=0), cache=cache))
        caches[b] = cache

    def step(b: int) -> Callable[[], Any]:
        tok = mx.ones((b, 1), dtype=mx.uint32)

        def run() -> None:
            cache = caches[b]
            mx.eval(mx.argmax(model(tok, cache=cache)[:, -1, :], axis=-1))
            for c in cache:  # keep the cache at the prompt's length
                c.offset -= 1
        return run

    def products(m: int) -> Callable[[], Any]:
        xs = {w.shape[1]: mx.random.normal((m, w.shape[1])) for w in weights}
        mx.eval(list(xs.values()))

        def run() -> None:
            mx.eval([xs[w.shape[1]] @ w.T for w in weights])
        return run

    big = max(weights[:-1] if len(weights) > 1 else weights, key=lambda w: w.size)
    wn = np.ascontiguousarray(np.array(big))  # [out, in]
    xn = np.random.default_rng(0).standard_normal((1, wn.shape[1])).astype(np.float32)
    yn = np.zeros((1, wn.shape[0]), np.float32)
    fp = ctypes.POINTER(ctypes.c_float)
    lib.cblas_sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, fp, ctypes.c_int, fp, ctypes.c_int,
                                                     ctypes.c_float, fp, ctypes.c_int]
    lib.cblas_sgemv.argtypes = [ctypes.c_int] * 4 + [ctypes.c_float, fp, ctypes.c_int, fp, ctypes.c_int,
                                                     ctypes.c_float, fp, ctypes.c_int]
    ptr = (lambda arr: arr.ctypes.data_as(fp))
    out_n, in_n = wn.shape

    def sgemm() -> None:  # y[1, out] = x[1, in] @ W.T, row-major (101), no-trans (111), trans (112)
        lib.cblas_sgemm(101, 111, 112, 1, out_n, in_n, 1.0, ptr(xn), in_n, ptr(wn), in_n, 0.0, ptr(yn), out_n)

    def sgemv() -> None:  # y = W @ x
        lib.cblas_sgemv(101, 111, out_n, in_n, 1.0, ptr(wn), in_n, ptr(xn), 1, 0.0, ptr(yn), 1)

    figures: dict[str, dict[str, list[float]]] = {str(t): {} for t in threads}
    prefill_cache: list[Any] = []

    def prefill() -> None:
        cache = make_prompt_cache(model)
        mx.eval(model(prompt, cache=cache)[:, -1, :])

    args = model.args
    layers = range(args.num_hidden_layers)
    scores = mx.random.normal((1, args.num_attention_heads, n_prompt, n_prompt))
    gate = mx.random.normal((1, n_prompt, args.intermediate_size))
    mx.eval(scores, gate)
    for _ in range(a.repeat):
        for t in threads:
            lib.openblas_set_num_threads(t)
            f = figures[str(t)]
            for b in rows:
                f.setdefault(f"step_{b}", []).append(timed(step(b), a.steps))
                f.setdefault(f"products_{b}", []).append(timed(products(b), a.steps))
            f.setdefault("sgemm_1", []).append(timed(sgemm, 20))
            f.setdefault("sgemv_1", []).append(timed(sgemv, 20))
            f.setdefault("prefill", []).append(timed(prefill, 1))
            f.setdefault("prefill_products", []).append(timed(products(n_prompt), 1))
            f.setdefault("prefill_exp", []).append(timed(lambda: mx.eval([mx.exp(scores) for _ in layers]), 1))
            f.setdefault("prefill_sigmoid", []).append(timed(lambda: mx.eval([mx.sigmoid(gate) for _ in layers]), 1))
            f.setdefault("prefill_swiglu", []).append(timed(lambda: mx.eval([swiglu(gate, gate) for _ in layers]), 1))
    del prefill_cache
    result = {t: {k: {"median_ms": round(statistics.median(v), 3), "turns": [round(x, 3) for x in v]}
                  for k, v in f.items()} for t, f in figures.items()}
    print(json.dumps({"checkpoint": str(a.checkpoint), "blas": REPORT.summary(), "weights": len(weights),
                      "largest": list(big.shape), "prompt_tokens": n_prompt, "figures": result}, indent=1))


if __name__ == "__main__":
    main()
