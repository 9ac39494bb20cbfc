"""--cpu-gemv: products of a few rows go to mlxd's row kernel (and other one-row products to OpenBLAS's sgemv)
through mlxd's sgemm front, with the same results within float32's rounding, each row's the same whatever the rows
beside it, and the tiny fixture's greedy tokens unchanged."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from mlxd.engine.cpu import blas, gemv_shim
from mlxd.errors import EngineError
from tests.conftest import BLAS_REPORT
from tests.numerics import assert_close

needs_front = pytest.mark.skipif(BLAS_REPORT.shim is None,
                                 reason=f"this session has no sgemm front ({BLAS_REPORT.gemv or BLAS_REPORT.chosen})")
needs_compiler = pytest.mark.skipif(gemv_shim.compiler() is None, reason="no C compiler on this machine")
needs_openblas = pytest.mark.skipif(blas.find_packaged() is None and blas.find_openblas() is None,
                                    reason="no OpenBLAS on this machine")

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
_F = ctypes.POINTER(ctypes.c_float)


def _ptr(a: np.ndarray) -> ctypes._Pointer:  # type: ignore[type-arg]
    return a.ctypes.data_as(_F)


def _sgemm(handle: ctypes.CDLL) -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    f = handle.cblas_sgemm
    f.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, _F, ctypes.c_int, _F, ctypes.c_int, ctypes.c_float, _F,
                                       ctypes.c_int]
    f.restype = None
    return f


@needs_front
@pytest.mark.parametrize("trans_a", [NO_TRANS, TRANS])
@pytest.mark.parametrize("trans_b", [NO_TRANS, TRANS])
def test_the_front_computes_a_one_row_product_as_sgemm_does(trans_a: int, trans_b: int) -> None:
    assert BLAS_REPORT.shim is not None
    sgemm = _sgemm(BLAS_REPORT.shim.handle)
    rng = np.random.default_rng(3)
    k, n, lda = 600, 500, 7  # a transposed one-row A is a column: its elements lda apart; 600 x 500 >= MIN_ELEMENTS
    a = rng.standard_normal((k, lda) if trans_a == TRANS else (1, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b == TRANS else (k, n)).astype(np.float32)
    c = rng.standard_normal((1, n)).astype(np.float32)
    row = a[:, 0] if trans_a == TRANS else a[0]
    expected = 0.5 * (row @ (b.T if trans_b == TRANS else b)) + 2.0 * c[0]
    before = BLAS_REPORT.shim.forwarded()

    sgemm(ROW_MAJOR, trans_a, trans_b, 1, n, k, 0.5, _ptr(a), lda if trans_a == TRANS else k, _ptr(b),
          k if trans_b == TRANS else n, 2.0, _ptr(c), n)

    assert BLAS_REPORT.shim.forwarded() == before + 1
    assert_close(mx.array(c[0]), mx.array(expected.astype(np.float32)), reduction=k, what="one-row product")


@needs_front
@pytest.mark.parametrize("garbage", [np.nan, np.inf])
def test_with_beta_zero_the_output_s_old_contents_do_not_matter(garbage: float) -> None:
    """mlx hands sgemm an uninitialised output with beta 0, as BLAS allows: sgemv must overwrite it too."""
    assert BLAS_REPORT.shim is not None
    sgemm = _sgemm(BLAS_REPORT.shim.handle)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((1, 640)).astype(np.float32), rng.standard_normal((512, 640)).astype(np.float32)
    c = np.full((1, 512), garbage, np.float32)

    sgemm(ROW_MAJOR, NO_TRANS, TRANS, 1, 512, 640, 1.0, _ptr(a), 640, _ptr(b), 640, 0.0, _ptr(c), 512)

    assert np.isfinite(c).all()
    assert_close(mx.array(c[0]), mx.array((a @ b.T)[0]), reduction=640, what="one-row product over garbage")


def _product(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32),
            rng.standard_normal((m, n)).astype(np.float32))


@needs_front
@pytest.mark.parametrize("m", [2, 3, 5, 8, 13, 16, 27, 32])
def test_a_few_rows_go_to_the_row_kernel_each_row_as_if_alone(m: int) -> None:
    """Odd sizes on purpose: columns that do not fill a tile, and a reduction with a tail beyond the vector lanes."""
    assert BLAS_REPORT.shim is not None
    sgemm = _sgemm(BLAS_REPORT.shim.handle)
    k, n = 1001, 517
    a, b, c = _product(m, k, n, seed=m)
    expected = 0.5 * (a @ b.T) + 2.0 * c
    before = BLAS_REPORT.shim.rows()

    sgemm(ROW_MAJOR, NO_TRANS, TRANS, m, n, k, 0.5, _ptr(a), k, _ptr(b), k, 2.0, _ptr(c), n)

    assert BLAS_REPORT.shim.rows() == before + 1
    assert_close(mx.array(c), mx.array(expected.astype(np.float32)), reduction=k, what=f"{m}-row product")
    # The same operations in the same order for each row, so the same bits as the row on its own.
    for i in (0, m - 1):
        alone = np.zeros((1, n), np.float32)
        sgemm(ROW_MAJOR, NO_TRANS, TRANS, 1, n, k, 1.0, _ptr(a[i:i + 1].copy()), k, _ptr(b), k, 0.0, _ptr(alone), n)
        together = np.zeros((m, n), np.float32)
        sgemm(ROW_MAJOR, NO_TRANS, TRANS, m, n, k, 1.0, _ptr(a), k, _ptr(b), k, 0.0, _ptr(together), n)
        assert np.array_equal(alone[0], together[i])


@needs_front
def test_callers_on_several_threads_get_the_same_bits() -> None:
    """One caller at a time shares the kernel's threads; another computes alone, in the same order."""
    assert BLAS_REPORT.shim is not None
    sgemm = _sgemm(BLAS_REPORT.shim.handle)
    m, k, n = 6, 768, 1024
    a, b, _ = _product(m, k, n, seed=9)
    reference = np.zeros((m, n), np.float32)
    sgemm(ROW_MAJOR, NO_TRANS, TRANS, m, n, k, 1.0, _ptr(a), k, _ptr(b), k, 0.0, _ptr(reference), n)

    def product(_: int) -> np.ndarray:
        c = np.full((m, n), np.nan, np.float32)
        sgemm(ROW_MAJOR, NO_TRANS, TRANS, m, n, k, 1.0, _ptr(a), k, _ptr(b), k, 0.0, _ptr(c), n)
        return c

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(product, range(64)))

    assert all(np.array_equal(r, reference) for r in results)
    assert_close(mx.array(reference), mx.array(a @ b.T), reduction=k, what="product on the kernel's threads")


@needs_front
def test_every_chunk_of_back_to_back_products_is_computed_once() -> None:
    """The kernel's threads take chunks of columns; with beta 1 a chunk computed twice, or by a thread still on the
    product before, would show in the sum. Products of two widths alternate, so that their chunks differ."""
    assert BLAS_REPORT.shim is not None
    sgemm = _sgemm(BLAS_REPORT.shim.handle)
    m, k = 3, 512
    wide, narrow = _product(m, k, 2048, seed=11), _product(m, k, 520, seed=12)
    sums = {id(p): np.zeros((m, p[1].shape[0]), np.float32) for p in (wide, narrow)}
    rounds = 400

    for i in range(2 * rounds):
        a, b, _ = product = wide if i % 2 else narrow
        n = b.shape[0]
        step = np.zeros((m, n), np.float32)
        sgemm(ROW_MAJOR, NO_TRANS, TRANS, m, n, k, 1.0, _ptr(a), k, _ptr(b), k, 0.0, _ptr(step), n)
        sgemm(ROW_MAJOR, NO_TRANS, TRANS, m, n, k, 1.0, _ptr(a), k, _ptr(b), k, 1.0, _ptr(sums[id(product)]), n)
        sums[id(product)] -= step  # exactly zero again, each time, unless a chunk was added twice or not at all

    assert all(not s.any() for s in sums.values())


@needs_front
@pytest.mark.parametrize(("m", "k", "n", "trans_b"), [(3, 1024, 512, NO_TRANS), (33, 1024, 512, TRANS),
                                                      (1, 64, 32, TRANS)],
                         ids=["a matrix as is", "seventeen rows", "a small matrix"])
def test_other_products_stay_with_sgemm(m: int, k: int, n: int, trans_b: int) -> None:
    assert BLAS_REPORT.shim is not None
    sgemm = _sgemm(BLAS_REPORT.shim.handle)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b == TRANS else (k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    before = BLAS_REPORT.shim.forwarded()

    sgemm(ROW_MAJOR, NO_TRANS, trans_b, m, n, k, 1.0, _ptr(a), k, _ptr(b), k if trans_b == TRANS else n, 0.0,
          _ptr(c), n)

    assert BLAS_REPORT.shim.forwarded() == before
    assert_close(mx.array(c), mx.array(a @ (b.T if trans_b == TRANS else b)), reduction=k,
                 what="product left to sgemm")


@needs_front
def test_mlx_decode_products_reach_the_front_and_a_row_does_not_depend_on_its_batch() -> None:
    x = mx.random.normal((3, 512), key=mx.random.key(5))
    w = mx.random.normal((1024, 512), key=mx.random.key(6))
    assert BLAS_REPORT.shim is not None
    before = BLAS_REPORT.shim.rows()

    one = x[:1] @ w.T
    mx.eval(one)
    three = x @ w.T
    mx.eval(three)

    assert BLAS_REPORT.shim.rows() - before == 2
    assert mx.array_equal(one[0], three[0]).item()


@needs_compiler
def test_the_front_is_built_once_per_source_and_compiler(tmp_path: Path) -> None:
    cc = gemv_shim.compiler()
    assert cc is not None
    first = gemv_shim.build(cc, tmp_path)
    stamp = first.stat().st_mtime_ns

    again = gemv_shim.build(cc, tmp_path)

    assert again == first and again.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # nothing left of the build


def test_a_compiler_that_fails_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="failed"):
        gemv_shim.build("/bin/false", tmp_path)


def test_an_unknown_gemv_mode_is_refused() -> None:
    with pytest.raises(EngineError, match="cpu-gemv: unknown mode 'fast'"):
        blas.preload(gemv="fast")  # type: ignore[arg-type]


_GREEDY = textwrap.dedent(
    """
    import sys
    from mlxd.engine.cpu import blas
    from mlxd.engine.cpu import gemv_shim
    gemv_shim.MIN_ELEMENTS = 0  # every decode product of the tiny fixture to the front, whatever its size
    report = blas.preload("auto", gemv=sys.argv[1])
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlxd.engine.loading.loader import load_model
    loaded = load_model(sys.argv[2])
    prompt = loaded.tokenizer.encode("def fibonacci(n):\\n    return n")
    greedy = [int(t) for t, _ in generate_step(mx.array(prompt), loaded.model, max_tokens=32)]
    print(report.shim is not None, report.summary().endswith("through mlxd's row kernel"))
    assert report.shim is None or report.shim.forwarded() > 0
    print(report.gemv)
    print(" ".join(map(str, greedy)))
    """
)


def _greedy(gemv: str, checkpoint: Path, env: dict[str, str] | None = None) -> list[str]:
    result = subprocess.run([sys.executable, "-c", _GREEDY, gemv, str(checkpoint)], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@needs_openblas
@needs_compiler
def test_greedy_tokens_are_the_same_with_and_without_the_front(tiny_checkpoint: Path) -> None:
    on, off = _greedy("auto", tiny_checkpoint), _greedy("off", tiny_checkpoint)

    assert on[0] == "True True"
    assert on[1].startswith(f"cpu-gemv auto: products of up to {gemv_shim.MAX_ROWS} rows through mlxd's row kernel")
    assert off[0] == "False False" and off[1] == "cpu-gemv off: every product through sgemm"
    assert on[2] == off[2] and len(on[2].split()) == 32


@needs_openblas
def test_without_a_compiler_the_log_says_every_product_stays_with_sgemm(tiny_checkpoint: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CC"}
    env["PATH"] = str(Path(sys.executable).parent)  # python, and no C compiler

    lines = _greedy("auto", tiny_checkpoint, env)

    assert lines[0] == "False False"
    assert lines[1] == "cpu-gemv auto: no C compiler to build the row kernel, so every product goes through sgemm"
