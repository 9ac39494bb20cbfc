"""Engine-tier helpers: a running model worker over the tiny checkpoint, and mlx_lm's own greedy reference."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mlxd.engine.sampling import SamplingParams
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.types import FinalEvent, GenerationRequest
from mlxd.engine.batching.worker import ModelWorker

GREEDY = SamplingParams(temperature=0.0)

PROMPTS = [
    "def fibonacci(n):\n",
    "The quick brown fox",
    "import os\nimport sys\n\n",
    "Hello, how are you today?",
]


def greedy_request(tokens: list[int], n_predict: int = 16, **fields: Any) -> GenerationRequest:
    """A greedy generation request for ``tokens``."""
    return GenerationRequest(prompt_tokens=list(tokens), sampling=fields.pop("sampling", GREEDY), n_predict=n_predict,
                             **fields)


def final(handle: Any) -> FinalEvent:
    """Read a handle to its end and return its FinalEvent (failing the test on an ErrorEvent)."""
    event = handle.result()
    assert isinstance(event, FinalEvent), event
    return event


def generate_greedy(model: Any, prompts: list[list[int]], n: int, **settings: Any
                    ) -> tuple[list[list[int]], dict[str, Any] | None]:
    """Greedy tokens for ``prompts``, all submitted at once to a worker over ``model`` with ``settings``, and the
    worker's ``speculative_info()``."""
    settings.setdefault("ctx_size", 4096)
    worker = ModelWorker(model, WorkerSettings(**settings))
    worker.start()
    try:
        handles = [worker.submit(greedy_request(p, n)) for p in prompts]
        return [list(final(h).tokens) for h in handles], worker.speculative_info()
    finally:
        worker.stop(0.0)


@pytest.fixture
def make_worker(tiny_model: Any) -> Iterator[Callable[..., ModelWorker]]:
    """Start workers over the tiny model with the given settings; all are stopped at the end of the test."""
    workers: list[ModelWorker] = []

    def make(**settings: Any) -> ModelWorker:
        settings.setdefault("ctx_size", 2048)
        worker = ModelWorker(tiny_model, WorkerSettings(**settings))
        worker.start()
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.stop(0.0)


@pytest.fixture(scope="session")
def reference(tiny_model: Any) -> Callable[[list[int], int], list[int]]:
    """mlx_lm's greedy tokens for a prompt (``mlx_lm.stream_generate``, the checkpoint's own EOS rule)."""
    from mlx_lm import stream_generate

    def run(tokens: list[int], n: int) -> list[int]:
        out = [r.token for r in stream_generate(tiny_model.model, tiny_model.tokenizer, tokens, max_tokens=n)]
        return out

    return run
