"""The multimodal worker on the synthetic Qwen2-VL checkpoint: image and text prompts batched together give each
request's solo tokens, a solo image run gives mlx-vlm's own greedy tokens, and the cache is keyed on the image."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from mlxd.engine.sampling import SamplingParams
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.types import FinalEvent, GenerationRequest
from tests.conftest import synthetic_checkpoint

pytest.importorskip("mlx_vlm")

MARKER = "<__media__>"
CHAT = "<|im_start|>user\n{}what is this<|im_end|>\n<|im_start|>assistant\n"


def image(seed: int, size: tuple[int, int] = (100, 80)) -> Any:
    import numpy as np
    from PIL import Image

    return Image.fromarray((np.random.RandomState(seed).rand(size[1], size[0], 3) * 255).astype("uint8"))


@pytest.fixture(scope="module")
def vl_model() -> Any:
    from mlxd.engine.vlm.load import load_multimodal

    return load_multimodal(synthetic_checkpoint("qwen2-vl-tiny"))


@pytest.fixture
def worker(vl_model: Any) -> Iterator[Any]:
    from mlxd.engine.vlm.worker import make_worker

    w = make_worker(vl_model, WorkerSettings(ctx_size=2048, parallel=4, warmup=False))
    w.start()
    yield w
    w.stop(0.0)


def media_request(worker: Any, seeds: list[int], n: int = 12, **fields: Any) -> GenerationRequest:
    from mlxd.engine.vlm.inputs import Medium

    media = []
    for seed in seeds:
        img = image(seed, (100 + 28 * (seed % 2), 80))
        media.append(Medium("image", img, hashlib.sha256(img.tobytes()).hexdigest()))
    ids, inputs = worker.prepare(CHAT.format(MARKER * len(seeds)), MARKER, media).result()
    return GenerationRequest(prompt_tokens=ids, sampling=SamplingParams(temperature=0.0), n_predict=n,
                             media=inputs, cache_namespace=f"chat:media:{inputs.key}", **fields)


def text_request(vl_model: Any, text: str = "hello there", n: int = 12) -> GenerationRequest:
    ids = list(vl_model.tokenizer.encode(CHAT.format(text)))
    return GenerationRequest(prompt_tokens=ids, sampling=SamplingParams(temperature=0.0), n_predict=n)


def run(worker: Any, request: GenerationRequest) -> FinalEvent:
    event = worker.submit(request).result()
    assert isinstance(event, FinalEvent), event
    return event


def test_mixed_image_and_text_batches_give_solo_tokens(worker: Any, vl_model: Any) -> None:
    requests = [media_request(worker, [0]), media_request(worker, [1]), text_request(vl_model),
                media_request(worker, [2, 3]), text_request(vl_model, "import os")]
    solo = [run(worker, r).tokens for r in requests]
    assert len(set(solo)) == len(solo)  # the images change the answers
    handles = [worker.submit(r) for r in requests]  # all at once: one decode batch with four slots busy
    together = [h.result() for h in handles]
    assert [e.tokens for e in together] == solo


def test_a_media_prompt_goes_through_in_passes_of_the_ubatch_size(worker: Any, vl_model: Any) -> None:
    """-ub bounds every forward pass of a media prompt as it does a text prompt's; the tokens stay those of one
    pass (up to the float rounding of shorter products, which greedy decoding does not see here)."""
    from mlxd.engine.vlm.load import load_multimodal
    from mlxd.engine.vlm.worker import make_worker

    # A model of its own, as the daemon loads one per worker: a view's row shifts belong to one scheduler.
    own = load_multimodal(synthetic_checkpoint("qwen2-vl-tiny"))
    small = make_worker(own, WorkerSettings(ctx_size=2048, parallel=2, ubatch_size=8, warmup=False))
    model, passes = small.scheduler.model, []

    class Recording:  # the model, noting the tokens of every pass that embeds media
        def __getattr__(self, name: str) -> Any:
            return getattr(model, name)

        def __call__(self, tokens: Any, **kwargs: Any) -> Any:
            if kwargs.get("inputs_embeds") is not None:
                passes.append(int(tokens.shape[1]))
            return model(tokens, **kwargs)

    small.scheduler.model = Recording()
    small.start()
    try:
        request = media_request(small, [0])
        tokens = run(small, request).tokens
    finally:
        small.stop(0.0)
    assert tokens == run(worker, media_request(worker, [0])).tokens
    assert len(passes) > 2 and max(passes) <= 8 and sum(passes) == len(request.prompt_tokens), passes


def test_image_tokens_equal_mlx_vlm_generate(worker: Any, vl_model: Any) -> None:
    from mlx_vlm.generate import generate

    ours = run(worker, media_request(worker, [0]))
    prompt = CHAT.format("<|vision_start|><|image_pad|><|vision_end|>")
    theirs = generate(vl_model.media.vlm, vl_model.media.processor, prompt, image=[image(0)], max_tokens=12,
                      temperature=0.0, verbose=False)
    assert ours.text.replace("\ufffd", "") == theirs.text.replace("\ufffd", "")


def test_prompt_cache_is_keyed_on_the_media(worker: Any) -> None:
    cold = run(worker, media_request(worker, [0]))
    hit = run(worker, media_request(worker, [0]))
    assert hit.timings.cache_n == len(media_request(worker, [0]).prompt_tokens) - 1 and hit.tokens == cold.tokens
    other = media_request(worker, [4])  # the same size as image 0: the same placeholder tokens
    assert other.prompt_tokens == media_request(worker, [0]).prompt_tokens
    missed = run(worker, other)
    assert missed.timings.cache_n == 0 and missed.tokens != cold.tokens


def test_mixed_image_audio_and_text_batch_on_gemma4() -> None:
    """The image-and-audio checkpoint: image, audio, image+audio and text prompts decoded together give each
    request's solo tokens."""
    import numpy as np

    from mlxd.engine.vlm.inputs import Medium
    from mlxd.engine.vlm.load import load_multimodal
    from mlxd.engine.vlm.worker import make_worker

    model = load_multimodal(synthetic_checkpoint("gemma4-tiny"))
    assert model.media is not None and model.media.modalities.names() == ["vision", "audio"]
    worker = make_worker(model, WorkerSettings(ctx_size=2048, parallel=4, warmup=False))
    worker.start()
    try:
        img = Medium("image", image(0), "img0")
        clip = Medium("audio", (np.random.RandomState(1).randn(16000) * 0.1).astype(np.float32), "clip1", 16000)
        requests = []
        for media in ([img], [clip], [img, clip]):
            ids, inputs = worker.prepare(CHAT.format(MARKER * len(media)), MARKER, media).result()
            requests.append(GenerationRequest(prompt_tokens=ids, sampling=SamplingParams(temperature=0.0),
                                              n_predict=10, media=inputs, cache_namespace=inputs.key))
        requests.append(text_request(model, n=10))
        solo = [run(worker, r).tokens for r in requests]
        assert len(set(solo)) == len(solo)
        handles = [worker.submit(r) for r in requests]
        assert [h.result().tokens for h in handles] == solo
    finally:
        worker.stop(0.0)


def test_a_cancelled_image_request_frees_its_slot(worker: Any) -> None:
    """Cancelled after its first token: its slot is free again and the next image request answers as before."""
    from mlxd.engine.types import ErrorEvent, TokenEvent

    expected = run(worker, media_request(worker, [1])).tokens
    handle = worker.submit(media_request(worker, [0], n=500))
    for event in handle:
        if isinstance(event, TokenEvent):
            handle.cancel()
            break
    assert isinstance(handle.result(), ErrorEvent)
    assert not any(slot["is_processing"] for slot in worker.slots())
    assert run(worker, media_request(worker, [1])).tokens == expected
