"""One generation as the scheduler sees it: its tokens, its text, and llama-server's rules for when it stops.

The order of the stop checks follows llama-server's ``process_token``: stop strings, the ``n_predict`` budget,
``t_max_predict_ms`` at a new line, ``n_indent``, the end of the slot's context, and end-of-generation tokens last.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from mlxd.engine.chat.budget import ReasoningBudget
from mlxd.engine.batching.detokenize import IncrementalDetokenizer
from mlxd.engine.batching.samplers import probability_report
from mlxd.engine.batching.stops import IndentLimit, StopMatcher
from mlxd.engine.types import (
    ErrorEvent,
    FinalEvent,
    GenerationRequest,
    ProgressEvent,
    ReasoningSpec,
    StopType,
    Timings,
    TokenEvent,
)

if TYPE_CHECKING:
    from mlxd.engine.batching.handle import RequestHandle


def reasoning_budget(spec: ReasoningSpec | None) -> ReasoningBudget | None:
    """The budget a request asks for: one that counts (``budget >= 0``) or one that can be ended on demand."""
    if spec is None or (spec.budget < 0 and not spec.controllable):
        return None
    return ReasoningBudget(spec.budget, starts_in_reasoning=spec.starts_in_reasoning, message=spec.message,
                           start_tag=spec.start_tag, end_tags=spec.end_tags)


class Sequence:
    """The state of one admitted request, from its first prompt token to its final event."""

    def __init__(
        self,
        request: GenerationRequest,
        handle: "RequestHandle",
        id_task: int,
        sampler: Any,
        decode: Any,
        eos_ids: set[int],
        n_ctx: int,
        server_n_predict: int,
        context_shift: bool = False,
        encode: Callable[[str], list[int]] | None = None,
    ) -> None:
        self.request = request
        self.handle = handle
        self.id_task = id_task
        self.sampler = sampler
        self.plain_greedy = False  # an argmax with nothing to edit or report: decoded ahead, pipelined
        self.greedy_bias: dict[int, float] = {}  # what a plain-greedy row adds to its logits before the argmax
        self.matcher: Any = None  # the constraint's engine.constrain.Matcher, when the request has one
        self._grammar_done = False
        self.eos_ids = eos_ids
        self.n_ctx = n_ctx
        self.context_shift = context_shift
        self.shifted = False  # the cache no longer holds a plain prefix of all_tokens
        self.n_predict = request.n_predict if request.n_predict != -1 else server_n_predict
        self.prompt = list(request.prompt_tokens)
        self.generated: list[int] = []
        self._decode = decode
        self._detok = IncrementalDetokenizer(decode, self.prompt)
        self._stops = StopMatcher(request.stop)
        self._indent = IndentLimit(request.n_indent)
        # The generated text sent so far (a matched stop string and what follows it cut off), as its pieces: a
        # string grown a piece a token copies everything before it each time (an attribute's += gets no in-place
        # help from CPython), 2 us a token at 32k tokens and 46 us at 128k.
        self._pieces: list[str] = []
        # Slot facts (llama-server's names).
        self.n_cache = 0  # prompt tokens taken from the prompt cache
        self.n_past = 0  # tokens in this sequence's KV cache
        self.n_prompt_processed = 0
        self.has_next_token = True
        self.has_new_line = False
        self.truncated = False
        self.stop_type: StopType = "none"
        self.stopping_word = ""
        self.failed = False
        self.n_drafted = 0  # draft tokens proposed for this sequence (speculative decoding)
        self.n_draft_accepted = 0
        self.n_draft_steps = 0
        self.spec_rng: Any = None  # speculative rejection sampling's generator (engine.speculative)
        self.ngram_state: Any = None  # what --spec-type ngram-mod's table keeps of it (engine.speculative.ngram_mod)
        # Timings.
        self.t_prompt_start = 0.0
        self.t_prompt_ms = 0.0
        self.t_gen_start = 0.0
        # Reasoning budget: watches the generated text; a forced end of reasoning waits here token by token.
        self.budget = reasoning_budget(request.reasoning) if encode is not None else None
        self._encode = encode
        self._forced: deque[int] = deque()

    @property
    def n_decoded(self) -> int:
        return len(self.generated)

    @property
    def n_remain(self) -> int:
        return -1 if self.n_predict < 0 else self.n_predict - self.n_decoded

    @property
    def all_tokens(self) -> list[int]:
        return self.prompt + self.generated

    def cached_tokens(self) -> list[int]:
        """The tokens whose keys and values are in this sequence's cache."""
        return self.all_tokens[: self.n_past]

    def prompt_done(self) -> None:
        now = time.perf_counter()
        self.t_prompt_ms = (now - self.t_prompt_start) * 1e3
        self.t_gen_start = now

    def forced_token(self) -> int | None:
        """The token the reasoning budget forces now in place of a sampled one, else None (ask before each token)."""
        if self.budget is None:
            return None
        if not self._forced and self._encode is not None:
            text = self.budget.forced_text()
            if text:
                self._forced.extend(self._encode(text))
        return self._forced.popleft() if self._forced else None

    def end_reasoning(self) -> bool:
        """``reasoning_end``: force the end of the reasoning in progress from the next token on."""
        return self.budget is not None and self.budget.force()

    def progress(self) -> None:
        """Report prompt processing so far, when the request asked for it (``return_progress``)."""
        if self.request.return_progress:
            ms = (time.perf_counter() - self.t_prompt_start) * 1e3
            self.handle.push(ProgressEvent(len(self.prompt), self.n_cache, self.n_past, int(ms), ms))

    @property
    def text(self) -> str:
        """The generated text sent so far (read by ``/slots`` from the event loop: it never rearranges the pieces)."""
        return "".join(self._pieces)

    def accept(self, token: int, sampled: Any = None) -> bool:
        """Record one sampled token, send what may be shown, and say whether generation goes on."""
        self.generated.append(token)
        if self.sampler is not None:
            self.sampler.accept(token)
        if self.matcher is not None and self.matcher.consume(token):
            self._grammar_done = True  # the grammar is complete: nothing more may follow
        is_eog = token in self.eos_ids and not self.request.ignore_eos
        piece = "" if is_eog else self._detok.add(token)
        if self.budget is not None:
            self.budget.accept(piece)
        out, word = self._stops.feed(piece)
        if word is not None:
            self.stop_type, self.stopping_word, self.has_next_token = "word", word, False
        if "\n" in piece:
            self.has_new_line = True
        cut = full = None
        sent = ""
        if self.request.n_indent > 0:
            sent = self.text
            full = sent + out + self._stops.held
            cut = self._indent.check(full, piece)
        if cut is not None:  # as upstream, the final text loses the line even where it was already streamed
            self.stop_type, self.has_next_token = "limit", False
        self._check_limits(is_eog)
        if cut is not None and full is not None:
            out, self._pieces[:] = full[len(sent) : cut], [full[:cut]]
        else:
            if not self.has_next_token and word is None:
                out += self._stops.flush()  # held text that never became a stop string
            if out:
                self._pieces.append(out)
        self._emit_token(token, out, sampled)
        return self.has_next_token

    def _check_limits(self, is_eog: bool) -> None:
        req = self.request
        if self.has_next_token and self.n_predict >= 0 and self.n_decoded >= self.n_predict:
            self.stop_type, self.has_next_token = "limit", False
        if (
            self.has_next_token
            and self.has_new_line
            and req.t_max_predict_ms > 0
            and (time.perf_counter() - self.t_gen_start) * 1e3 > req.t_max_predict_ms
        ):
            self.stop_type, self.has_next_token = "limit", False
        # The token just accepted still has to be fed, and the slot needs room for it (unless it shifts).
        if self.has_next_token and not self.context_shift and self.n_past + 1 >= self.n_ctx:
            self.truncated, self.stop_type, self.has_next_token = True, "limit", False
        if is_eog or self._grammar_done:
            self.stop_type, self.has_next_token = "eos", False

    def _emit_token(self, token: int, text: str, sampled: Any) -> None:
        probs = chosen = None
        if sampled is not None and self.request.n_probs > 0 and getattr(sampled, "probs", None) is not None:
            probs, chosen = probability_report(sampled, self.request.post_sampling_probs, self._piece)
        self.handle.push(TokenEvent(self.n_decoded - 1, token, text, probs, chosen))

    def _piece(self, token: int) -> str:
        return self._decode([token])

    def final_event(self, id_slot: int) -> FinalEvent:
        """The closing event: everything sent, why it stopped, and the timings."""
        if self.has_next_token:  # stopped from outside (n_predict 0, shutdown)
            self.has_next_token = False
        now = time.perf_counter()
        gen_ms = (now - self.t_gen_start) * 1e3 if self.t_gen_start else 0.0
        timings = Timings(
            cache_n=self.n_cache,
            prompt_n=self.n_prompt_processed,
            prompt_ms=self.t_prompt_ms,
            predicted_n=self.n_decoded,
            predicted_ms=gen_ms,
            draft_n=self.n_drafted,
            draft_n_accepted=self.n_draft_accepted,
            draft_steps=self.n_draft_steps,
        )
        return FinalEvent(
            text=self.text,
            tokens=tuple(self.generated),
            stop_type=self.stop_type,
            stopping_word=self.stopping_word,
            truncated=self.truncated,
            n_prompt_tokens=len(self.prompt),
            timings=timings,
            id_slot=id_slot,
        )

    def finish(self, id_slot: int) -> None:
        self.handle.push(self.final_event(id_slot))

    def fail(self, message: str, type_: str = "server_error", code: int = 500) -> None:
        self.has_next_token = False
        self.failed = True
        self.handle.push(ErrorEvent(message, type_, code))

