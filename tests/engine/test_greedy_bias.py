"""Greedy rows with a logit bias are decoded ahead on the device and draw exactly what the sampling chain draws."""

from __future__ import annotations

from mlxd.engine.sampling import SamplingParams
from tests.engine.conftest import PROMPTS, final, greedy_request


def test_biased_greedy_rows_match_the_sampling_chain(tiny_model, make_worker) -> None:
    prompts = [list(tiny_model.tokenizer.encode(p)) for p in PROMPTS]
    plain = make_worker(parallel=1)
    unbiased = [final(plain.submit(greedy_request(p, 12))).tokens for p in prompts]
    # Ban each prompt's second greedy token and favour another, so that the bias changes what is drawn.
    biases = [{toks[1]: -1e9, (toks[0] + 7) % 50 + 10: 0.5} for toks in unbiased]

    # n_probs makes a row report probabilities, which sends it through the sampling chain on the host.
    chain = [
        final(plain.submit(greedy_request(p, 12, sampling=SamplingParams(temperature=0.0, logit_bias=b, n_probs=1))))
        for p, b in zip(prompts, biases)
    ]
    batched = make_worker(parallel=len(prompts))
    handles = [batched.submit(greedy_request(p, 12, sampling=SamplingParams(temperature=0.0, logit_bias=b)))
               for p, b in zip(prompts, biases)]
    together = [final(h) for h in handles]

    assert [d.tokens for d in together] == [c.tokens for c in chain]
    assert all(d.tokens[1] != u[1] for d, u in zip(together, unbiased))
