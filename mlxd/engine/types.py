"""The engine's wire between the asyncio side and a model worker thread: requests in, events out.

These are the only types the api and daemon layers need to drive generation; the worker, scheduler, sampler
and prompt cache stay behind them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from mlxd.engine.constrain import CompiledConstraint, ConstraintSpec

StopType = Literal["none", "eos", "limit", "word"]


@dataclass(frozen=True)
class TokenProb:
    """One candidate in a probability report (``n_probs``): id, text piece, and probability or logprob."""

    id: int
    text: str
    prob: float  # a probability when post_sampling_probs, else a log-probability
    bytes: tuple[int, ...] = ()


@dataclass(frozen=True)
class TokenEvent:
    """One generated token as it leaves the worker.

    ``text`` is the piece that is safe to show now: text held back because it may start a stop string, or
    because it ends inside a multi-byte character, arrives in a later event.
    """

    index: int
    token_id: int
    text: str
    probs: tuple[TokenProb, ...] | None = None  # candidates after (or before) sampling, when n_probs > 0
    chosen: TokenProb | None = None


@dataclass(frozen=True)
class Timings:
    """llama-server's ``timings`` object."""

    cache_n: int
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    draft_n: int = 0  # speculative decoding: tokens the draft proposed, and how many the target accepted
    draft_n_accepted: int = 0
    draft_steps: int = 0  # verification steps that checked this sequence's proposals (not rendered)

    @property
    def prompt_per_second(self) -> float:
        return 1e3 * self.prompt_n / self.prompt_ms if self.prompt_ms > 0 else 0.0

    @property
    def predicted_steps(self) -> int:
        """Decode steps of the generation: the first token comes with the prompt's last pass (b10621's n_gen_steps)."""
        return max(0, self.predicted_n - 1)

    @property
    def predicted_per_second(self) -> float:
        return 1e3 * self.predicted_steps / self.predicted_ms if self.predicted_ms > 0 else 0.0


@dataclass(frozen=True)
class FinalEvent:
    """The end of a generation: why it stopped, everything generated, and its timings."""

    text: str
    tokens: tuple[int, ...]
    stop_type: StopType
    stopping_word: str
    truncated: bool
    n_prompt_tokens: int
    timings: Timings
    id_slot: int


@dataclass(frozen=True)
class ErrorEvent:
    """A generation that failed; the worker goes on serving others."""

    message: str
    type: str = "server_error"  # an error type of b10621's envelope
    code: int = 500


@dataclass(frozen=True)
class ProgressEvent:
    """Prompt processing so far (``return_progress``), after each prompt chunk: llama-server's ``prompt_progress``."""

    total: int  # prompt tokens
    cache: int  # of which taken from the prompt cache
    processed: int  # of which in the slot's cache now (cached ones included)
    time_ms: int  # since the prompt began processing
    elapsed_ms: float = 0.0  # the same, unrounded (the ``timings`` of a progress partial)


Event = TokenEvent | FinalEvent | ErrorEvent | ProgressEvent


@dataclass(frozen=True)
class ReasoningSpec:
    """A reasoning budget for one request (``--reasoning-budget``, ``reasoning_budget_*``, ``reasoning_control``).

    Tokens generated inside ``start_tag`` ... one of ``end_tags`` are counted; when ``budget`` of them are spent,
    the worker forces ``message + end_tags[0]`` into the sequence. ``controllable`` keeps the budget armed even
    when unrestricted, so that a running request's reasoning can be ended on demand.
    """

    budget: int = -1  # -1 unrestricted, 0 ends reasoning as soon as it starts
    message: str = ""
    starts_in_reasoning: bool = False  # the prompt left the start tag open
    start_tag: str = "<think>"
    end_tags: tuple[str, ...] = ("</think>",)
    controllable: bool = False


@dataclass
class GenerationRequest:
    """Everything the worker needs to run one generation. ``sampling`` is an ``engine.sampling.SamplingParams``."""

    prompt_tokens: list[int]
    sampling: object
    n_predict: int = -1
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    n_probs: int = 0
    post_sampling_probs: bool = False
    cache_prompt: bool = True
    # Prompt-cache namespace: a chat-rendered prefix must never be adopted by a raw prompt, nor across LoRA states.
    cache_namespace: str = "raw"
    id_slot: int = -1
    n_keep: int = 0
    n_discard: int = 0
    n_indent: int = 0
    t_max_predict_ms: int = 0
    # Adapter scales snapshotted at admission ({adapter_id: scale}); None means the server-wide scales.
    lora: dict[int, float] | None = None
    # Free-form, shown on /slots (e.g. the request's sampling params as llama-server renders them).
    display_params: dict[str, object] = field(default_factory=dict)
    # Constrained decoding: an ``engine.constrain.ConstraintSpec``, or one already compiled with the worker's
    # ``constraint_compiler`` (a ``CompiledConstraint``); None for free generation.
    constraint: ConstraintSpec | CompiledConstraint | None = None
    # Reasoning budget and on-demand end of reasoning; None when neither applies.
    reasoning: ReasoningSpec | None = None
    # Send a ProgressEvent after each prompt chunk.
    return_progress: bool = False
    # Images and audio of the prompt: an ``engine.vlm.MediaInputs`` (its key is part of cache_namespace); None
    # for a text prompt.
    media: object | None = None
