"""Ending reasoning on demand (``reasoning_end``) and budgets with a request's own tags."""

from __future__ import annotations

from mlxd.engine.chat.budget import ReasoningBudget


def test_force_ends_reasoning_only_while_it_is_counted() -> None:
    budget = ReasoningBudget(-1, message=" Now.")
    assert not budget.force()  # not reasoning yet: nothing to end
    for piece in ("<think>", "a"):
        budget.accept(piece)
    assert budget.force()
    assert not budget.force()  # already handed out
    assert budget.forced_text() == " Now.</think>"
    assert budget.forced_text() is None
    budget.accept(" Now.</think>")
    assert not budget.in_reasoning and not budget.force()


def test_own_tags_and_the_first_end_tag_forced() -> None:
    budget = ReasoningBudget(1, start_tag="[THINK]", end_tags=("[/THINK]", "</reasoning>"))
    budget.accept("[THI")
    budget.accept("NK]")  # a tag split across tokens still opens the window
    assert budget.in_reasoning
    budget.accept("a")
    assert budget.forced_text() == "[/THINK]"
    budget.accept("[/THINK]")
    budget.accept("[THINK]")
    budget.accept("b</reasoning>")  # any end tag closes reasoning
    assert not budget.in_reasoning and budget.forced_text() is None
