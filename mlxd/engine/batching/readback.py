"""Typed host read-backs of small MLX arrays (token ids, pads, probabilities) for the scheduler's bookkeeping."""

from __future__ import annotations

from typing import cast

import mlx.core as mx

# mlx's stub types ``array.tolist()`` as a recursive ``int | float | complex | list[...]`` whatever the array's
# rank and dtype; each helper below states the shape its callers pass, so the cast is the array's known type.


def ints(a: mx.array) -> list[int]:
    """A 1-D integer array (one token or pad per row) as Python ints."""
    return cast(list[int], a.tolist())


def item_int(a: mx.array) -> int:
    """A one-element real-valued array (an int or float item) as a Python int."""
    return int(cast(float, a.item()))


def int_rows(a: mx.array) -> list[list[int]]:
    """A 2-D integer array ([rows, k] token ids) as rows of Python ints."""
    return cast(list[list[int]], a.tolist())


def float_rows(a: mx.array) -> list[list[float]]:
    """A 2-D float array ([rows, k] probabilities) as rows of Python floats."""
    return cast(list[list[float]], a.tolist())
