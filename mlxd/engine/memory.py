"""Memory handed back after a model is freed (issue 28: RSS stayed at about 240 MB after router churn with every
model unloaded, against 120 MB before).

Three holders keep a freed model's pages: the model's Python objects until the cyclic collector runs (a worker, its
scheduler and caches form cycles), MLX's buffer cache, which keeps freed arrays' buffers for reuse
(``mx.clear_cache`` returns them), and glibc's heap, which keeps what a burst of large allocations grew it to until
``malloc_trim`` (Linux; absent elsewhere, where this step is skipped). Each step is cheap next to a model load, and
runs on a thread, never on the event loop.
"""

from __future__ import annotations

import gc

import mlx.core as mx

from mlxd import heap
from mlxd.engine.threads import run_on_own_thread


def release_freed_memory() -> None:
    """Collect cycles, empty MLX's buffer cache and trim the C heap (blocking: call it on a thread). The MLX call
    runs on a thread of its own (mlxd.engine.threads: a pooled thread must not touch MLX)."""
    gc.collect()
    run_on_own_thread(mx.clear_cache, name="mlxd-free")
    heap.trim()
