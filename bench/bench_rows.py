"""A decode step's matrix products, one to sixteen rows: mlxd's row kernel (``--cpu-gemv auto``) against OpenBLAS's
sgemm, in-process.

    .venv/bin/python bench/bench_rows.py [--hidden 1024] [--intermediate 2816] [--kv 256] [--layers 16] [--rows 1,2,4,8,12,16]

The matrices of a llama of those sizes (by default the 180M model of ../shared/tools/make_mid_llama.py: q, k, v, o,
gate, up and down for each of 16 layers, 720 MB of float32), each product ``x @ W.T`` as mlx calls it, every
layer's own weights so that they stream from memory as in a real step. Prints, per row count, the milliseconds of
one step's products (median of ``--repeat``) through OpenBLAS's ``cblas_sgemm`` and through the front (the row
kernel from 1 to ``gemv_shim.MAX_ROWS`` rows), and OpenBLAS's ``cblas_sgemv`` for one row. Not part of the test
suite.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlxd.engine.cpu import blas  # noqa: E402

REPORT = blas.preload("auto", gemv="auto")
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
_F = ctypes.POINTER(ctypes.c_float)


def _fn(f: ctypes._CFuncPtr, n_ints: int, tail: list[type]) -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    f.argtypes = [ctypes.c_int] * n_ints + tail
    f.restype = None
    return f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=2816)
    ap.add_argument("--kv", type=int, default=256, help="the k and v projections' outputs")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--rows", default="1,2,4,8,12,16")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if REPORT.shim is None or REPORT.library is None:
        raise SystemExit(f"no row kernel in this process: {REPORT.describe()}")
    gemm_tail = [ctypes.c_float, _F, ctypes.c_int, _F, ctypes.c_int, ctypes.c_float, _F, ctypes.c_int]
    openblas = ctypes.CDLL(REPORT.library)
    sgemm = _fn(openblas.cblas_sgemm, 6, gemm_tail)
    sgemv = _fn(openblas.cblas_sgemv, 4, gemm_tail)
    front = _fn(REPORT.shim.handle.cblas_sgemm, 6, gemm_tail)
    h, i, kv = args.hidden, args.intermediate, args.kv
    shapes = [(h, h), (kv, h), (kv, h), (h, h), (i, h), (i, h), (h, i)]
    rng = np.random.default_rng(0)
    layers = [[rng.standard_normal((n, k), dtype=np.float32) for n, k in shapes] for _ in range(args.layers)]
    print(f"{REPORT.describe()}\n{args.layers} layers, {sum(w.nbytes for ws in layers for w in ws) / 1e6:.0f} MB")
    print("| rows | OpenBLAS sgemm ms | OpenBLAS sgemv ms | row kernel ms | sgemm / row kernel |")
    print("|---|---|---|---|---|")
    for m in [int(r) for r in args.rows.split(",")]:
        xs = {k: rng.standard_normal((m, k), dtype=np.float32) for k in {h, i}}
        cs = {n: np.zeros((m, n), np.float32) for n in {h, i, kv}}

        def step(how: str) -> None:
            for ws in layers:
                for w in ws:
                    n, k = w.shape
                    x, c = xs[k].ctypes.data_as(_F), cs[n].ctypes.data_as(_F)
                    if how == "sgemv":
                        sgemv(ROW_MAJOR, NO_TRANS, n, k, 1.0, w.ctypes.data_as(_F), k, x, 1, 0.0, c, 1)
                    else:
                        (front if how == "front" else sgemm)(ROW_MAJOR, NO_TRANS, TRANS, m, n, k, 1.0, x, k,
                                                              w.ctypes.data_as(_F), k, 0.0, c, n)

        ways = ["sgemm", "front"] + (["sgemv"] if m == 1 else [])
        times: dict[str, list[float]] = {w: [] for w in ways}
        for _ in range(args.repeat):  # the ways take turns, so that drift falls on each alike
            for way in ways:
                step(way)
                t0 = time.perf_counter()
                step(way)
                times[way].append((time.perf_counter() - t0) * 1e3)
        med = {w: statistics.median(t) for w, t in times.items()}
        gemv = f"{med['sgemv']:.1f}" if "sgemv" in med else "-"
        print(f"| {m} | {med['sgemm']:.1f} | {gemv} | {med['front']:.1f} | {med['sgemm'] / med['front']:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
