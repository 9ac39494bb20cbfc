"""The disk tier's decision: read an entry only when reading it beats computing its tokens."""

from __future__ import annotations

from mlxd.engine.batching.prompt_cache.disk_worth import MIN_TOKENS, Worth


def test_too_few_tokens_are_never_read_or_written() -> None:
    w = Worth()
    assert not w.use(MIN_TOKENS - 1, 1) and not w.worth_writing(MIN_TOKENS - 1)
    assert w.use(MIN_TOKENS, 10**12) and w.worth_writing(MIN_TOKENS)  # nothing measured yet: read, to measure


def test_the_measured_rates_decide() -> None:
    w = Worth()
    w.observe_read(100 << 20, 0.1)  # about 1 GB/s
    w.observe_prompt(1000, 1.0)  # 1000 tokens/s
    # 1000 tokens cost 1 s to compute: 100 MiB (0.1 s) is worth reading, 2 GiB (2 s) is not.
    assert w.use(1000, 100 << 20)
    assert not w.use(1000, 2 << 30)
    # A faster prompt rate (a GPU) moves the line.
    for _ in range(30):
        w.observe_prompt(100_000, 1.0)
    assert not w.use(1000, 100 << 20)


def test_tiny_reads_and_short_prompts_do_not_move_the_rates() -> None:
    w = Worth()
    w.observe_read(1000, 1.0)
    w.observe_prompt(MIN_TOKENS - 1, 100.0)
    assert w.read_bps is None and w.prompt_tps is None
