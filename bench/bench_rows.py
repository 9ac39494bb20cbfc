"""A decode step's matrix products, one to sixteen rows: mlxd's row kernel (``--cpu-gemv auto``) against OpenBLAS's
sgemm, in-process.

    .venv/bin/python bench/bench_rows.py [--hidden 1024] [--intermediate 2816] [--kv 256] [--layers 16]
        [--rows 1,2,4,8,12,16] [--against REV]

The matrices of a llama of those sizes (by default the 180M model of ../shared/tools/make_mid_llama.py: q, k, v, o,
gate, up and down for each of 16 layers, 720 MB of float32), each product ``x @ W.T`` as mlx calls it, every
layer's own weights so that they stream from memory as in a real step. Prints, per row count, the milliseconds of
one step's products (median of ``--repeat``) through OpenBLAS's ``cblas_sgemm`` and through the front (the row
kernel from 1 to ``gemv_shim.MAX_ROWS`` rows), and OpenBLAS's ``cblas_sgemv`` for one row; with ``--against REV``,
also the row kernel as it was at that git revision (its gemv_shim.c built beside this one's, the two taking turns),
and whether its results are this one's bits. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlxd.engine.cpu import blas, gemv_shim  # noqa: E402

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
    ap.add_argument("--against", metavar="REV", help="also the row kernel of this git revision")
    args = ap.parse_args()
    if REPORT.shim is None or REPORT.library is None:
        raise SystemExit(f"no row kernel in this process: {REPORT.describe()}")
    gemm_tail = [ctypes.c_float, _F, ctypes.c_int, _F, ctypes.c_int, ctypes.c_float, _F, ctypes.c_int]
    openblas = ctypes.CDLL(REPORT.library)
    sgemm = _fn(openblas.cblas_sgemm, 6, gemm_tail)
    sgemv = _fn(openblas.cblas_sgemv, 4, gemm_tail)
    front = _fn(REPORT.shim.handle.cblas_sgemm, 6, gemm_tail)
    fronts = {"front": front}
    if args.against:
        fronts[args.against] = _fn(_kernel_at(args.against, openblas).cblas_sgemm, 6, gemm_tail)
    h, i, kv = args.hidden, args.intermediate, args.kv
    shapes = [(h, h), (kv, h), (kv, h), (h, h), (i, h), (i, h), (h, i)]
    rng = np.random.default_rng(0)
    layers = [[rng.standard_normal((n, k), dtype=np.float32) for n, k in shapes] for _ in range(args.layers)]
    print(f"{REPORT.describe()}\n{args.layers} layers, {sum(w.nbytes for ws in layers for w in ws) / 1e6:.0f} MB")
    against = f" row kernel at {args.against} ms | it / row kernel | same bits |" if args.against else ""
    print("| rows | OpenBLAS sgemm ms | OpenBLAS sgemv ms | row kernel ms | sgemm / row kernel |" + against)
    print("|---|---|---|---|---|" + "---|---|---|" * bool(args.against))
    for m in [int(r) for r in args.rows.split(",")]:
        xs = {k: rng.standard_normal((m, k), dtype=np.float32) for k in {h, i}}
        ways = ["sgemm", *fronts] + (["sgemv"] if m == 1 else [])
        outs = {way: {n: np.zeros((m, n), np.float32) for n in {h, i, kv}} for way in ways}

        def step(how: str) -> None:
            cs = outs[how]
            for ws in layers:
                for w in ws:
                    n, k = w.shape
                    x, c = xs[k].ctypes.data_as(_F), cs[n].ctypes.data_as(_F)
                    if how == "sgemv":
                        sgemv(ROW_MAJOR, NO_TRANS, n, k, 1.0, w.ctypes.data_as(_F), k, x, 1, 0.0, c, 1)
                    else:
                        fronts.get(how, sgemm)(ROW_MAJOR, NO_TRANS, TRANS, m, n, k, 1.0, x, k, w.ctypes.data_as(_F),
                                               k, 0.0, c, n)

        times: dict[str, list[float]] = {w: [] for w in ways}
        for _ in range(args.repeat):  # the ways take turns, so that drift falls on each alike
            for way in ways:
                step(way)
                t0 = time.perf_counter()
                step(way)
                times[way].append((time.perf_counter() - t0) * 1e3)
        med = {w: statistics.median(t) for w, t in times.items()}
        gemv = f"{med['sgemv']:.1f}" if "sgemv" in med else "-"
        line = f"| {m} | {med['sgemm']:.1f} | {gemv} | {med['front']:.1f} | {med['sgemm'] / med['front']:.2f} |"
        if args.against:  # the last step's outputs (the last layer's): one kernel's bits against the other's
            same = all(np.array_equal(outs["front"][n], outs[args.against][n]) for n in outs["front"])
            line += f" {med[args.against]:.1f} | {med[args.against] / med['front']:.2f} | {'yes' if same else 'no'} |"
        print(line, flush=True)


def _kernel_at(rev: str, openblas: ctypes.CDLL) -> ctypes.CDLL:
    """gemv_shim.c as it was at git revision ``rev``, built and handed OpenBLAS as the daemon's is (its names kept
    local, so that this process's cblas_sgemm stays the current front)."""
    source = subprocess.run(["git", "show", f"{rev}:mlxd/engine/cpu/gemv_shim.c"], check=True, capture_output=True,
                            text=True, cwd=Path(__file__).resolve().parent.parent).stdout
    cc = gemv_shim.compiler()
    if cc is None:
        raise SystemExit("no C compiler")
    built = gemv_shim.build(cc, Path(tempfile.mkdtemp(prefix="mlxd-rows-")), source=source)
    handle = ctypes.CDLL(str(built), mode=ctypes.RTLD_LOCAL)
    handle.mlxd_front_init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_int,
                                       ctypes.c_long]
    threads = openblas.openblas_get_num_threads
    threads.restype = ctypes.c_int
    handle.mlxd_front_init(ctypes.cast(openblas.cblas_sgemm, ctypes.c_void_p),
                           ctypes.cast(openblas.cblas_sgemv, ctypes.c_void_p), gemv_shim.MIN_ELEMENTS,
                           gemv_shim.MAX_ROWS, max(1, threads()), gemv_shim.SPIN_NS)
    return handle


if __name__ == "__main__":
    main()
