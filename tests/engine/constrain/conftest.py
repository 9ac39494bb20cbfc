"""A minimal decode loop over the tiny checkpoint: model forward, constraint mask, seeded numpy sampling.

Random weights produce gibberish, so any output that parses and validates does so only because of the mask.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache

from mlxd.engine.constrain import (
    ConstraintCompiler,
    ConstraintSpec,
    ConstraintTokenizer,
    Matcher,
    apply_masks,
    build_tokenizer,
)

if TYPE_CHECKING:
    from mlxd.engine.loading.loader import LoadedModel

# The tiny model's logits spread widely (std 8); sampling at this temperature keeps seeds apart.
TEMPERATURE = 4.0


@dataclass
class Generation:
    tokens: list[int]
    text: str
    finished_by_grammar: bool


@pytest.fixture(scope="session")
def constraint_tokenizer(tiny_model: LoadedModel) -> ConstraintTokenizer:
    return build_tokenizer(tiny_model.tokenizer, n_vocab=tiny_model.vocab_size)


@pytest.fixture(scope="session")
def compiler(constraint_tokenizer: ConstraintTokenizer) -> ConstraintCompiler:
    return ConstraintCompiler(constraint_tokenizer)


Decode = Callable[..., list[Generation]]


@pytest.fixture(scope="session")
def decode(
    tiny_model: LoadedModel, compiler: ConstraintCompiler, constraint_tokenizer: ConstraintTokenizer
) -> Decode:
    """``decode(specs, seeds, prompt=..., max_tokens=...)``: one batch, one row per spec (None = unconstrained).

    A seed of None samples greedily. Rows share the prompt, so one KV cache holds the whole batch.
    """

    def run(
        specs: Sequence[ConstraintSpec | None],
        seeds: Sequence[int | None],
        prompt: str = "def main():",
        max_tokens: int = 320,
    ) -> list[Generation]:
        model, tokenizer = tiny_model.model, tiny_model.tokenizer
        matchers = [Matcher(compiler.compile(s), constraint_tokenizer) if s is not None else None for s in specs]
        rngs = [np.random.default_rng(seed) if seed is not None else None for seed in seeds]
        prompt_ids = tokenizer.encode(prompt)
        cache = make_prompt_cache(model)
        inputs = mx.array([prompt_ids] * len(specs))
        out: list[list[int]] = [[] for _ in specs]
        done = [False] * len(specs)
        by_grammar = [False] * len(specs)
        for _ in range(max_tokens):
            logits = model(inputs, cache=cache)[:, -1, :]
            logits = apply_masks(logits, matchers).astype(mx.float32)
            host = np.array(logits)
            step: list[int] = []
            for row, rng in enumerate(rngs):
                step.append(_sample(host[row], rng))
            for row, token in enumerate(step):
                if done[row]:
                    continue
                if token in tiny_model.eos_token_ids and matchers[row] is None:
                    done[row] = True
                    continue
                matcher = matchers[row]
                if matcher is not None and matcher.consume(token):
                    by_grammar[row] = True
                    done[row] = True
                    if token in tiny_model.eos_token_ids:
                        continue
                out[row].append(token)
            if all(done):
                break
            inputs = mx.array(step)[:, None]
        return [
            Generation(tokens, tokenizer.decode(tokens), finished)
            for tokens, finished in zip(out, by_grammar, strict=True)
        ]

    return run


def _sample(row: np.ndarray, rng: np.random.Generator | None) -> int:
    if rng is None:
        return int(np.argmax(row))
    scaled = row / TEMPERATURE
    scaled = scaled - scaled.max()
    p = np.exp(scaled)
    p /= p.sum()
    return int(rng.choice(len(p), p=p))
