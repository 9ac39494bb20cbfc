"""The per-token cost of constrained decoding: the same decode loop with and without the constraint mask.

    .venv/bin/python bench/bench_constrained.py CHECKPOINT [--tokens 128] [--streams 1,8] [--constraint json]

For each stream count, one batch decodes ``--tokens`` steps from a shared prompt, greedy, twice: plain (model
forward, argmax) and constrained (model forward, ``apply_masks``, argmax, ``Matcher.consume``). A stream whose
grammar completes starts over with a fresh matcher, as a new request would, so every step stays constrained.
The constraint is a JSON schema (``json``: an array of objects with free-text strings, where most of the
vocabulary is allowed) or a GBNF grammar (``gbnf``: digits and commas, where almost nothing is).
Also times the mask pieces alone: llguidance's mask computation and the apply on the batch's logits.
Prints one JSON document. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlxd.engine.cpu import blas  # noqa: E402  (before mlx is imported)

BLAS = blas.preload("auto")

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx_lm.models.cache import make_prompt_cache  # noqa: E402

from mlxd.engine.constrain import (  # noqa: E402
    ConstraintCompiler,
    ConstraintSpec,
    Matcher,
    apply_masks,
    build_tokenizer,
    schema_source,
)
from mlxd.engine.loading.loader import load_model  # noqa: E402

PROMPT = "def fibonacci(n):\n    if n < 2:\n        return n\n"
CONSTRAINTS = {
    "json": ConstraintSpec(
        "json_schema",
        schema_source(
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
                    "required": ["name", "kind", "n"],
                },
            }
        ),
        origin="bench",
    ),
    "gbnf": ConstraintSpec("gbnf", 'root ::= [0-9]+ ("," [0-9]+)*', origin="bench"),
}


def decode(loaded: Any, streams: int, steps: int, new_matcher: Any | None) -> float:
    """Decode tokens/s of the whole batch over ``steps`` steps (prefill excluded)."""
    model = loaded.model
    prompt = list(loaded.tokenizer.encode(PROMPT))
    cache = make_prompt_cache(model)
    matchers = [new_matcher() for _ in range(streams)] if new_matcher else None
    logits = model(mx.array([prompt] * streams), cache=cache)[:, -1, :]
    mx.eval(logits)
    start = time.perf_counter()
    for _ in range(steps):
        if matchers is not None:
            logits = apply_masks(logits, matchers)
        tokens = mx.argmax(logits, axis=-1)
        ids = tokens.tolist()
        if matchers is not None:
            for i, token in enumerate(ids):
                if matchers[i].consume(token):
                    matchers[i] = new_matcher()
        logits = model(tokens[:, None], cache=cache)[:, -1, :]
        mx.async_eval(logits)
    mx.eval(logits)
    return streams * steps / (time.perf_counter() - start)


def mask_pieces(loaded: Any, compiler: ConstraintCompiler, tok: Any, spec: ConstraintSpec, streams: int) -> dict:
    """Microseconds per step of one mask's computation, and of applying a batch's (already computed) masks."""
    compiled = compiler.compile(spec)
    matchers = [Matcher(compiled, tok) for _ in range(streams)]
    logits = mx.random.normal((streams, loaded.vocab_size))
    mx.eval(logits)
    n = 200
    raw = compiled.new_matcher()
    row = np.zeros(tok.mask_words, dtype=np.int32)
    start = time.perf_counter()
    for _ in range(n):
        raw.unsafe_compute_mask_ptr(row.ctypes.data, row.nbytes)
    compute = (time.perf_counter() - start) / n
    start = time.perf_counter()
    for _ in range(n):
        mx.eval(apply_masks(logits, matchers))
    apply = (time.perf_counter() - start) / n
    return {"mask_compute_us": round(compute * 1e6, 1), "mask_apply_us": round(apply * 1e6, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--streams", default="1,8")
    parser.add_argument("--constraint", choices=sorted(CONSTRAINTS), default="json")
    args = parser.parse_args()

    loaded = load_model(args.checkpoint)
    t0 = time.perf_counter()
    tok = build_tokenizer(loaded.tokenizer, n_vocab=loaded.vocab_size, eos_token_ids=loaded.eos_token_ids)
    tokenizer_s = time.perf_counter() - t0
    compiler = ConstraintCompiler(tok)
    spec = CONSTRAINTS[args.constraint]
    t0 = time.perf_counter()
    compiled = compiler.compile(spec)
    compile_s = time.perf_counter() - t0

    def fresh() -> Matcher:
        return Matcher(compiled, tok)

    decode(loaded, 1, 8, fresh)  # warm-up: kernels, thread pool
    rows = []
    for streams in (int(s) for s in args.streams.split(",")):
        plain = decode(loaded, streams, args.tokens, None)
        constrained = decode(loaded, streams, args.tokens, fresh)
        rows.append(
            {
                "streams": streams,
                "plain_tok_s": round(plain, 1),
                "constrained_tok_s": round(constrained, 1),
                "ratio": round(constrained / plain, 3),
                **mask_pieces(loaded, compiler, tok, spec, streams),
            }
        )
    report = {
        "checkpoint": str(args.checkpoint),
        "vocab_size": loaded.vocab_size,
        "constraint": args.constraint,
        "tokens": args.tokens,
        "blas": BLAS.summary if hasattr(BLAS, "summary") else str(BLAS),
        "tokenizer_build_s": round(tokenizer_s, 3),
        "compile_s": round(compile_s, 4),
        "results": rows,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
