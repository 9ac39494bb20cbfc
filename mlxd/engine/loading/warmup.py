"""The warmup run (``--warmup``): one tiny forward pass before a model serves, as llama-server's empty run.

MLX builds and caches its kernels on first use; running the model once over the checkpoint's BOS and EOS tokens
moves that cost out of the first request. The pass uses a throwaway cache, so no slot or prompt cache sees it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("mlxd.engine.loading.warmup")


def warm_up(loaded: Any) -> list[int]:
    """Run ``loaded.model`` once over BOS and EOS (whichever the tokenizer has); returns the tokens it ran."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    tokenizer = loaded.tokenizer
    tokens = [t for t in (getattr(tokenizer, "bos_token_id", None), *loaded.eos_token_ids[:1]) if t is not None]
    tokens = tokens or [0]
    name = getattr(loaded, "name", "the model")
    log.info("warming up %s with an empty run (%d tokens)", name, len(tokens))
    started = time.perf_counter()
    logits = loaded.model(mx.array([tokens]), cache=make_prompt_cache(loaded.model))
    mx.eval(logits)
    log.info("warm-up of %s done in %.2f s", name, time.perf_counter() - started)
    return tokens
