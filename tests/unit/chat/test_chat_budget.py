"""--reasoning-budget accounting on generated token texts."""

from __future__ import annotations

from mlxd.engine.chat.budget import ReasoningBudget


def run(budget: ReasoningBudget, pieces: list[str]) -> list[tuple[str, str | None]]:
    """Feed pieces as a worker would, forcing the end when told; the texts that reached the sequence."""
    out: list[tuple[str, str | None]] = []
    queue = list(pieces)
    while queue:
        forced = budget.forced_text()
        piece = forced if forced is not None else queue.pop(0)
        budget.accept(piece)
        out.append((piece, forced))
    return out


def test_unrestricted_budget_never_forces() -> None:
    budget = ReasoningBudget(-1)
    steps = run(budget, ["<think>", "a", "b", "c", "</think>", "x"])
    assert all(forced is None for _, forced in steps)
    assert budget.spent == 3 and not budget.in_reasoning


def test_budget_forces_the_end_after_n_reasoning_tokens() -> None:
    budget = ReasoningBudget(2, message=" Enough.")
    steps = run(budget, ["<think>", "a", "b", "c", "d"])
    assert [piece for piece, _ in steps] == ["<think>", "a", "b", " Enough.</think>", "c", "d"]
    assert not budget.in_reasoning and budget.spent == 2


def test_zero_budget_ends_reasoning_at_once_even_when_the_prompt_opened_it() -> None:
    budget = ReasoningBudget(0, starts_in_reasoning=True)
    assert budget.forced_text() == "</think>"
    assert budget.forced_text() is None  # handed out once
    budget.accept("</think>")
    assert not budget.in_reasoning


def test_tokens_of_the_tags_are_not_counted() -> None:
    budget = ReasoningBudget(3)
    for piece in ["<thi", "nk>", "a", "</", "think>", "after"]:
        budget.accept(piece)
        assert budget.forced_text() is None
    assert budget.spent == 2  # "a" and the "</" that was still inside


def test_a_new_think_block_opens_a_fresh_window() -> None:
    budget = ReasoningBudget(1)
    steps = run(budget, ["<think>", "a", "b", "<think>", "c", "d"])
    assert [piece for piece, forced in steps if forced] == ["</think>", "</think>"]
