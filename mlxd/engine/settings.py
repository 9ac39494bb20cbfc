"""The model worker's settings, in llama-server's vocabulary, and how they resolve against a loaded checkpoint."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# llama-server resolves `--parallel -1` ("auto") to this many slots.
AUTO_PARALLEL = 4


class WorkerSettings(BaseModel):
    """What one model worker needs from the configuration: slots, context, batching and the prompt cache."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parallel: int = Field(-1, ge=-1, description="number of slots; -1 = auto (4)")
    ctx_size: int = Field(0, ge=0, description="total context; 0 = the checkpoint's training context")
    kv_unified: bool | None = Field(None, description="every slot may use the whole context; None = when auto")
    batch_size: int = Field(2048, ge=1, description="prompt tokens processed per scheduler step (prefill chunk)")
    ubatch_size: int = Field(512, ge=1, description="accepted for compatibility; MLX has no physical batch split")
    cont_batching: bool = True
    cache_prompt: bool = Field(True, description="the default of requests' cache_prompt (the api applies it)")
    cache_ram_mib: int = Field(8192, ge=-1, description="prompt cache budget in MiB; -1 = no limit, 0 = disabled")
    context_shift: bool = False
    keep: int = Field(0, ge=-1, description="prompt tokens kept on a context shift; -1 = all")
    n_predict: int = Field(-1, ge=-1, description="server-wide generation limit; -1 = none")
    queue_max: int = Field(256, ge=0, description="requests that may wait for a slot before new ones are refused")
    slot_prompt_similarity: float = Field(0.1, description="share of a prompt a slot's cached prefix must exceed for "
                                          "the slot to be chosen by similarity; 0 = least recently used only")
    special: bool = Field(False, description="render special tokens in generated text (--special)")
    warmup: bool = Field(True, description="run one tiny forward pass before serving (--warmup)")
    cache_type_k: str | None = Field(None, description="-ctk when given: the KV cache type of keys; None = the "
                                     "checkpoint's dtype (b10621's default f16 left unset)")
    cache_type_v: str | None = Field(None, description="-ctv when given (see cache_type_k)")
    cache_type_k_draft: str | None = Field(None, description="-ctkd when given (the draft's cache_type_k)")
    cache_type_v_draft: str | None = Field(None, description="-ctvd when given")
    spec_draft_n_max: int = Field(3, ge=0, description="most tokens the draft proposes per step")
    spec_draft_n_min: int = Field(0, ge=0, description="fewest: the adaptive draft length stays at or above it")
    spec_draft_p_min: float = Field(0.0, ge=0.0, le=1.0, description="a row stops proposing at a draft token "
                                    "whose probability is below it (0 = never)")
    pin_cpu: bool = Field(True, description="keep the worker thread and its MLX stream thread on one CPU "
                          "(--worker-affinity auto; see engine.affinity)")

    @property
    def n_parallel(self) -> int:
        """Slots after resolving ``-1`` (auto)."""
        return AUTO_PARALLEL if self.parallel == -1 else max(1, self.parallel)

    @property
    def unified(self) -> bool:
        """Whether every slot may use the whole context (upstream's default when the slot count is auto)."""
        return self.parallel == -1 if self.kv_unified is None else self.kv_unified

    def n_ctx_total(self, n_ctx_train: int) -> int:
        """The total context after resolving ``0`` to the checkpoint's training context."""
        return self.ctx_size if self.ctx_size > 0 else n_ctx_train

    def n_ctx_slot(self, n_ctx_train: int) -> int:
        """Each slot's context: the total, split evenly across slots unless the context is unified."""
        total = self.n_ctx_total(n_ctx_train)
        return total if self.unified else max(1, total // self.n_parallel)

    @property
    def cache_ram_bytes(self) -> int | None:
        """The prompt-cache budget in bytes; None means unlimited."""
        return None if self.cache_ram_mib < 0 else self.cache_ram_mib * 1024 * 1024
