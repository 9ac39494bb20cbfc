"""Slot files name the model that wrote them (mlxd.engine.batching.slots.identity, mlxd.engine.batching.slots.state_file): each refusal
names its reason, and the weights digest tells apart two checkpoints of one shape."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from mlxd.engine.loading.loader import LoadedModel, load_model
from mlxd.engine.batching.slots.identity import owner_of, weights_digest
from mlxd.engine.batching.slots.state_file import SlotFileError, load, save
from mlxd.engine.batching.slots.table import Resident
from tests.conftest import synthetic_checkpoint


def filled(loaded: LoadedModel, tokens: list[int]) -> Resident:
    cache = make_prompt_cache(loaded.model)
    loaded.model(mx.array([tokens]), cache=cache)
    mx.eval([c.state for c in cache])
    return Resident("raw", tokens, list(cache))


def test_the_digest_tells_weights_apart_and_is_stable(tiny_model: Any) -> None:
    other = load_model(synthetic_checkpoint("tiny", seed=1))
    again = load_model(synthetic_checkpoint("tiny"))
    assert weights_digest(tiny_model.model) == weights_digest(again.model)
    assert weights_digest(tiny_model.model) != weights_digest(other.model)


def test_each_mismatch_is_refused_with_its_reason(tiny_model: Any, tmp_path: Path) -> None:
    owner = owner_of(tiny_model, 256)
    path = tmp_path / "s.bin"
    tokens = list(range(1, 21))
    assert save(filled(tiny_model, tokens), path, owner) == 20
    fresh = make_prompt_cache(tiny_model.model)
    restored = load(path, fresh, owner)
    assert restored is not None and restored.tokens == tokens
    assert load(path, fresh, replace(owner, n_ctx=20)) is not None  # a smaller context that holds the tokens
    cases = [(replace(owner, model="0" * 64), "another model"), (replace(owner, arch="llama"), "qwen3 model; this one is llama"),
             (replace(owner, n_ctx=19), "more than this slot's context")]
    for wrong, words in cases:
        with pytest.raises(SlotFileError, match=words):
            load(path, fresh, wrong)
    with pytest.raises(SlotFileError, match="layers"):
        load(path, fresh[:-1], owner)
