"""Speculative decoding in the batch scheduler: a draft proposes for every row, the target verifies them together.

The self-speculative pair: ``tiny`` with six appended layers that add nothing (the target) and ``tiny`` itself (the
draft), which therefore proposes what the target would pick. ``tiny`` with another seed is a draft that never
agrees.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest

from mlxd.engine.loading.loader import load_model
from mlxd.engine.sampling import SamplingParams
from mlxd.engine.settings import WorkerSettings
from mlxd.engine.speculative.draft_model import PROBE_EVERY
from mlxd.engine.batching.worker import ModelWorker
from mlxd.errors import EngineError
from tests.conftest import synthetic_checkpoint
from tests.engine.conftest import PROMPTS, final, greedy_request

PROMPTS_20 = [PROMPTS[i % len(PROMPTS)] + " again" * i for i in range(20)]


@pytest.fixture(scope="module")
def target() -> Any:
    return load_model(synthetic_checkpoint("tiny", passthrough=6))


@pytest.fixture(scope="module")
def draft(tiny_model: Any) -> Any:
    return tiny_model


def _generate(model: Any, draft: Any, prompts: list[str], n: int = 32, sampling: list[Any] | None = None,
              **settings: Any) -> tuple[list[Any], dict[str, Any] | None]:
    worker = ModelWorker(model, WorkerSettings(ctx_size=4096, parallel=8, **settings), draft=draft)
    worker.start()
    try:
        requests = [greedy_request(list(model.tokenizer.encode(p)), n) for p in prompts]
        if sampling is not None:
            requests = [dataclasses.replace(r, sampling=s) if s is not None else r for r, s in zip(requests, sampling)]
        handles = [worker.submit(r) for r in requests]  # all queued at once: rows join and leave the batch
        return [final(h) for h in handles], worker.speculative_info()
    finally:
        worker.stop(0.0)


def test_greedy_with_and_without_a_draft_is_identical_on_20_concurrent_prompts(target: Any, draft: Any) -> None:
    plain, none = _generate(target, None, PROMPTS_20)
    spec, info = _generate(target, draft, PROMPTS_20, cache_type_k_draft="f16", cache_type_v_draft="f16")
    assert none is None and info is not None
    assert [f.tokens for f in spec] == [f.tokens for f in plain]
    # The pair agrees, so nearly every proposal is accepted (the draft's f16 cache rounds a few argmaxes apart).
    assert info["n_accepted"] > 0.95 * info["n_drafted"] > 0
    assert sum(f.timings.draft_n for f in spec) == info["n_drafted"]
    assert sum(f.timings.draft_n_accepted for f in spec) == info["n_accepted"]
    assert all(f.timings.draft_n == 0 for f in plain)


def test_a_never_agreeing_draft_stops_drafting_and_changes_nothing(target: Any) -> None:
    other = load_model(synthetic_checkpoint("tiny", seed=1))
    plain, _ = _generate(target, None, PROMPTS[:2], n=96)
    spec, info = _generate(target, other, PROMPTS[:2], n=96)
    assert [f.tokens for f in spec] == [f.tokens for f in plain]
    assert info is not None and info["n_accepted"] < info["n_drafted"] / 4
    # k falls to 0 within a few steps, then only a probe every PROBE_EVERY plain steps drafts again.
    assert info["n_steps"] <= 8 + 96 // PROBE_EVERY


def test_a_row_proposes_no_more_than_it_still_generates(target: Any, draft: Any) -> None:
    """As b10621, a row offers at most one proposal fewer than the tokens it still has to generate: the pair always
    agrees, so with that room every proposal offered is accepted, even with a long --spec-draft-n-max."""
    plain, _ = _generate(target, None, PROMPTS, n=21)
    spec, info = _generate(target, draft, PROMPTS, n=21, spec_draft_n_max=8)
    assert [f.tokens for f in spec] == [f.tokens for f in plain]
    assert info is not None and info["n_drafted"] > 0 and info["n_accepted"] == info["n_drafted"]


def test_a_slots_next_request_drafts_from_an_empty_draft_row(target: Any, draft: Any) -> None:
    """One slot serves requests one after another: the next request's draft row starts empty, not with the last
    request's tokens (which made the pair disagree from the second request on)."""
    worker = ModelWorker(target, WorkerSettings(ctx_size=512, parallel=1), draft=draft)
    worker.start()
    try:
        spec = [final(worker.submit(greedy_request(list(target.tokenizer.encode(p)), 24))) for p in PROMPTS[:3]]
        info = worker.speculative_info()
    finally:
        worker.stop(0.0)
    plain, _ = _generate(target, None, PROMPTS[:3], n=24)
    assert [f.tokens for f in spec] == [f.tokens for f in plain]
    assert all(f.timings.draft_n > 0 and f.timings.draft_n_accepted == f.timings.draft_n for f in spec)
    assert info is not None and info["n_accepted"] == info["n_drafted"]


def test_greedy_rows_propose_with_their_logit_bias(target: Any, draft: Any) -> None:
    """The target's argmax takes a greedy row's logit bias; so do its proposals, or a banned token the draft would
    pick is a rejected proposal every time."""
    first, _ = _generate(target, None, PROMPTS[:2], n=24)
    banned = {t: -1e9 for t in {*first[0].tokens[:8], *first[1].tokens[:8]}}
    biased = [SamplingParams(temperature=0.0, logit_bias=banned)] * 2
    plain, _ = _generate(target, None, PROMPTS[:2], n=24, sampling=biased)
    spec, info = _generate(target, draft, PROMPTS[:2], n=24, sampling=biased)
    assert [f.tokens for f in spec] == [f.tokens for f in plain] != [f.tokens for f in first]
    assert not set(banned) & {t for f in spec for t in f.tokens}
    assert info is not None and info["n_drafted"] > 0 and info["n_accepted"] == info["n_drafted"]


def test_p_min_limits_what_a_row_proposes(target: Any, draft: Any) -> None:
    plain, _ = _generate(target, None, PROMPTS[:2])
    spec, info = _generate(target, draft, PROMPTS[:2], draft_p_min=1.0)  # no draft token is that sure
    assert [f.tokens for f in spec] == [f.tokens for f in plain]
    assert info is not None and info["n_drafted"] == 0


def test_sampling_rows_speculate_beside_greedy_ones(target: Any, draft: Any) -> None:
    """A sampling row is verified by rejection sampling in the same steps as greedy rows; the greedy rows keep
    their exact tokens, and a seeded sampling row repeats itself."""
    sampled = SamplingParams(temperature=0.8, seed=7)
    plain, _ = _generate(target, None, PROMPTS, sampling=[None, sampled, None, None])
    spec, info = _generate(target, draft, PROMPTS, sampling=[None, sampled, None, None])
    again, _ = _generate(target, draft, PROMPTS, sampling=[None, sampled, None, None])
    assert [f.tokens for i, f in enumerate(spec) if i != 1] == [f.tokens for i, f in enumerate(plain) if i != 1]
    assert len(spec[1].tokens) == 32 and spec[1].timings.draft_n > 0 and spec[1].timings.draft_n_accepted > 0
    assert again[1].tokens == spec[1].tokens


def test_rejection_sampling_keeps_the_chains_distribution() -> None:
    """The first token emitted by verification is distributed as the target chain's p, whatever the draft's q.

    8,000 seeded trials over 8 tokens: the total variation distance between the emitted frequencies and p has a
    standard error of about sqrt(8 / 8000) / 2 = 0.016, so 0.05 is three of them; a verifier that emitted the
    draft's proposals unchecked sits at TV(p, q) = 0.4 or more here.
    """
    import numpy as np

    from mlxd.engine.speculative import rejection as rs
    from mlxd.engine.sampling import TokenSampler

    sampler = TokenSampler(SamplingParams(temperature=0.9, top_k=6, seed=1))
    gen = np.random.default_rng(0)
    target = gen.normal(size=(2, 8)).astype(np.float32) * 2
    draft_logits = gen.normal(size=8).astype(np.float32) * 2
    p = rs.distribution(sampler, target[0])
    q = rs.distribution(sampler, draft_logits)
    assert 0.5 * np.abs(p - q).sum() > 0.4
    counts = np.zeros(8)
    for _ in range(8_000):
        d = rs.draw(q, gen)
        tokens, _ = rs.verify(sampler, target, [d], [q], 1, gen)
        counts[tokens[0]] += 1
    assert 0.5 * np.abs(counts / counts.sum() - p).sum() < 0.05


def test_a_draft_with_another_vocabulary_is_refused_naming_both_sizes(target: Any, draft: Any) -> None:
    wider = dataclasses.replace(draft, vocab_size=4096)
    with pytest.raises(EngineError, match=r"vocabulary \(4096 tokens\) differs from the target's \(2048 tokens\)"):
        ModelWorker(target, WorkerSettings(ctx_size=512), draft=wider)


def test_the_draft_comes_from_the_hub_cache(tmp_path: Path, tiny_checkpoint: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from mlxd.config import Config
    from mlxd.engine.spec import _draft

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = tmp_path / "models--acme--draft" / "snapshots" / ("0" * 40)
    shutil.copytree(tiny_checkpoint, snapshot)
    (tmp_path / "models--acme--draft" / "refs").mkdir()
    (tmp_path / "models--acme--draft" / "refs" / "main").write_text("0" * 40)
    cfg = Config(hf_repo_draft="acme/draft", offline=True, model_store_root=str(tmp_path))
    source = _draft(cfg)
    assert source is not None and source.resolve() == snapshot
    with pytest.raises(EngineError, match="needs a draft model"):
        _draft(cfg.model_copy(update={"hf_repo_draft": None, "spec_type": ["draft-simple"]}))
    assert _draft(cfg.model_copy(update={"spec_type": ["none"]})) is None
