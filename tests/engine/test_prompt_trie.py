"""The prompt cache's trie answers exactly as mlx_lm's, whatever was added, removed or superseded before."""

from __future__ import annotations

import random
from typing import Any

from mlx_lm.models.cache import PromptTrie

from mlxd.engine.batching.prompt_cache.trie import IndexedPromptTrie


def _same(a: Any, b: Any, call: str, *args: Any) -> Any:
    outcomes = []
    for trie in (a, b):
        try:
            outcomes.append(getattr(trie, call)(*args))
        except KeyError:
            outcomes.append(KeyError)
    assert outcomes[0] == outcomes[1], (call, args, outcomes)
    return outcomes[0]


def test_indexed_trie_matches_mlx_lm() -> None:
    # Small vocabularies make shared prefixes, equally short extensions (ties) and nested entries common.
    for seed in range(120):
        rnd = random.Random(seed)
        ours, theirs = IndexedPromptTrie(), PromptTrie()
        stored: list[tuple[str, list[int]]] = []
        vocab = rnd.choice([2, 3, 5])
        for _ in range(150):
            op = rnd.random()
            model = rnd.choice(["raw", "chat"])
            tokens = [rnd.randrange(vocab) for _ in range(rnd.randrange(8))]
            if op < 0.4:
                _same(theirs, ours, "add", model, tokens, len(stored))
                stored.append((model, tokens))
            elif op < 0.55 and stored:
                _same(theirs, ours, "pop", *stored.pop(rnd.randrange(len(stored))))
            elif op < 0.65 and stored:
                _same(theirs, ours, "pop_prefixes", *rnd.choice(stored))
            elif (model, tokens) in stored or not tokens or rnd.random() < 0.5:
                result = _same(theirs, ours, "search", model, tokens)
                for found in (result.exact, result.shorter, result.longer):
                    if found is not None:
                        _same(theirs, ours, "get", model, found)
            for root in ours._roots.values():  # refreshes stop early: every node must still be up to date
                _assert_up_to_date(root)


def _assert_up_to_date(node: Any) -> None:
    """Each node's nearest stored sequence is what a refresh of it, its children up to date, computes."""
    for child in node.children.values():
        _assert_up_to_date(child)
    kept = node.ext_len, node.ext_child
    assert not node.refresh() and (node.ext_len, node.ext_child) == kept
