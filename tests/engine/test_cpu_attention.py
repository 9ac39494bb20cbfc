"""The CPU attention with a fused softmax (engine.cpu.attention) against mlx's own, for every mask mlx-lm passes."""

from __future__ import annotations

import mlx.core as mx
import pytest

from mlxd.engine.cpu import attention
from tests.numerics import assert_close


def _qkv(B: int, n_q: int, n_kv: int, L: int, S: int, d: int = 32) -> tuple[mx.array, mx.array, mx.array]:
    key = mx.random.key(L * 31 + S)
    q, k, v = (mx.random.normal(shape, key=mx.random.split(key, 3)[i])
               for i, shape in enumerate([(B, n_q, L, d), (B, n_kv, S, d), (B, n_kv, S, d)]))
    return q, k, v


@pytest.mark.parametrize(("n_q", "n_kv"), [(4, 4), (8, 2), (6, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("mask", ["none", "causal", "bool [L, S]", "bool [B, 1, L, S]", "bool [B, H, L, S]",
                                  "additive [L, S]"])
@pytest.mark.parametrize(("L", "S"), [(5, 5), (3, 9), (1, 12)], ids=["prompt", "chunk", "decode"])
def test_the_fused_softmax_attends_as_mlx_does(n_q: int, n_kv: int, mask: str, L: int, S: int) -> None:
    B = 2
    q, k, v = _qkv(B, n_q, n_kv, L, S)
    causal = (mx.arange(L)[:, None] + (S - L)) >= mx.arange(S)[None]
    padded = mx.broadcast_to(causal, (B, 1, L, S)) & (mx.arange(S) >= mx.array([[0], [2]]).reshape(B, 1, 1, 1))
    masks = {"none": None, "causal": "causal", "bool [L, S]": causal, "bool [B, 1, L, S]": padded,
             "bool [B, H, L, S]": mx.broadcast_to(padded, (B, n_q, L, S)),
             "additive [L, S]": mx.where(causal, 0.0, -1e9).astype(mx.float32)}

    ours = attention.attention(q, k, v, scale=0.25, mask=masks[mask])
    theirs = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=masks[mask])

    assert ours.shape == theirs.shape
    assert_close(ours, theirs, reduction=S * q.shape[-1], what=f"attention, mask {mask}")


def test_a_row_masked_whole_stays_finite() -> None:
    """A left-padded row's queries may see no position at all: their output must not be NaN, which would reach the
    keys and values of the positions after them through the next layers."""
    q, k, v = _qkv(1, 2, 2, 2, 4)
    mask = mx.array([[False, False, False, False], [True, True, False, False]])

    out = attention.attention(q, k, v, scale=0.5, mask=mask)

    assert not mx.isnan(out).any().item()


def test_other_dtypes_and_sinks_go_to_mlx() -> None:
    q, k, v = _qkv(1, 2, 2, 3, 3)
    half = [a.astype(mx.float16) for a in (q, k, v)]
    out = attention.attention(*half, scale=0.5, mask="causal")
    assert out.dtype == mx.float16
    sinks = mx.zeros((2,))
    assert_close(attention.attention(q, k, v, scale=0.5, sinks=sinks),
                 mx.fast.scaled_dot_product_attention(q, k, v, scale=0.5, sinks=sinks), reduction=3, what="sinks")
