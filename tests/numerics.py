"""Tolerances for comparing two computation orders of the same float math, derived from the dtype and the length
of the sums involved: bit-equality holds only where the operations (and so the BLAS kernels) are the same, and a
different kernel, thread count or CPU reorders a sum without changing what it means."""

from __future__ import annotations

import mlx.core as mx


def unit_roundoff(dtype: mx.Dtype) -> float:
    return float(mx.finfo(dtype).eps) / 2


def rounding_bound(dtype: mx.Dtype, reduction: int, stages: int = 0) -> float:
    """The relative error bound of a computation whose sums of up to ``reduction`` terms are reordered: mlx
    accumulates in float32, so a sum contributes gamma_n = n*u / (1 - n*u) with float32's unit roundoff u; a
    narrower ``dtype`` also rounds each of the ``stages`` intermediate results it stores, each by its own u."""
    nu = reduction * unit_roundoff(mx.float32)
    assert nu < 0.5, f"a {reduction}-term sum has no meaningful bound"
    stored = 0.0 if dtype == mx.float32 else stages * unit_roundoff(dtype)
    return nu / (1 - nu) + stored


def assert_close(x: mx.array, y: mx.array, *, reduction: int, stages: int = 0, what: str = "") -> None:
    """``x`` and ``y`` agree within the rounding a reordered ``reduction``-term computation allows, scaled by the
    largest magnitude in ``y`` (an error in a sum is relative to the terms, not to the result, which may cancel)."""
    assert x.shape == y.shape, (what, x.shape, y.shape)
    a, b = x.astype(mx.float32), y.astype(mx.float32)
    scale = max(mx.abs(b).max().item(), 1.0)
    tolerance = rounding_bound(x.dtype, reduction, stages) * scale
    worst = mx.abs(a - b).max().item()
    assert worst <= tolerance, f"{what}: {worst:.3g} > {tolerance:.3g} ({x.dtype}, {reduction}-term sums)"


def assert_same_greedy(x: mx.array, y: mx.array, *, reduction: int, stages: int = 0) -> None:
    """The argmax of each row agrees wherever its top two logits are further apart than the rounding bound (a
    closer pair may legitimately swap between two computation orders)."""
    a, b = x.astype(mx.float32).reshape(-1, x.shape[-1]), y.astype(mx.float32).reshape(-1, y.shape[-1])
    tolerance = 2 * rounding_bound(x.dtype, reduction, stages) * max(mx.abs(b).max().item(), 1.0)
    top2 = mx.sort(b, axis=-1)[:, -2:]
    margin = (top2[:, 1] - top2[:, 0]).tolist()
    same = (mx.argmax(a, axis=-1) == mx.argmax(b, axis=-1)).tolist()
    for row, (m, s) in enumerate(zip(margin, same)):
        assert s or m <= tolerance, f"row {row}: argmax differs with a margin of {m:.3g} > {tolerance:.3g}"
