"""The model worker's settings: the options it reads, under their Config field names, and how they resolve against a
loaded checkpoint.

This is the one handover from the configuration to a worker. Every field but ``queue_max`` is an option of the
table (its Config field name, the same name from the command line to the scheduler), with the table's default, so
:meth:`WorkerSettings.of` copies them from a Config by name and nothing is renamed or defaulted twice.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from mlxd.config import table

if TYPE_CHECKING:
    from mlxd.config import Config

# llama-server resolves `--parallel -1` ("auto") to this many slots.
AUTO_PARALLEL = 4


def _default(name: str) -> Any:
    return table().get(name).default


class WorkerSettings(BaseModel):
    """What one model worker needs from the configuration: slots, context, batching and the prompt cache."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parallel: int = _default("parallel")  # slots; -1 = auto (4)
    ctx_size: int = _default("ctx-size")  # total context; 0 = the checkpoint's training context
    kv_unified: bool | None = _default("kv-unified")  # every slot may use the whole context; None = when auto
    batch_size: int = _default("batch-size")  # prompt tokens processed per scheduler step (prefill chunk)
    ubatch_size: int = _default("ubatch-size")  # most prompt tokens in one forward pass (the physical batch)
    cont_batching: bool = _default("cont-batching")
    cache_prompt: bool = _default("cache-prompt")  # the default of requests' cache_prompt (the api applies it)
    cache_ram: int = _default("cache-ram")  # prompt cache budget in MiB; -1 = no limit, 0 = disabled
    cache_disk: str | None = _default("cache-disk")  # the prompt cache's disk tier (engine.batching.prompt_cache.disk); None = off
    cache_disk_max: int = _default("cache-disk-max")  # its size limit in MiB; -1 = no limit, 0 = read only
    cache_idle_slots: bool = _default("cache-idle-slots")  # idle slots go to the prompt cache when a task starts
    context_shift: bool = _default("context-shift")
    keep: int = _default("keep")  # prompt tokens kept on a context shift; -1 = all
    n_predict: int = _default("n-predict")  # server-wide generation limit; -1 = none
    slot_prompt_similarity: float = _default("slot-prompt-similarity")  # share of a prompt a slot's cached prefix
    # must exceed for the slot to be chosen by similarity; 0 = least recently used only
    special: bool = _default("special")  # render special tokens in generated text
    warmup: bool = _default("warmup")  # run one tiny forward pass before serving
    worker_affinity: str = _default("worker-affinity")  # auto: pin the worker and its MLX stream to one CPU
    # -ctk / -ctv, only when a source gave them: b10621's default f16 is its own storage type, under MLX the
    # checkpoint's dtype (None) keeps greedy tokens those of the model as trained.
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    cache_type_k_draft: str | None = None  # -ctkd / -ctvd when given: the draft's cache types
    cache_type_v_draft: str | None = None
    spec_draft_n_max: int = _default("spec-draft-n-max")  # most tokens the draft proposes per step
    spec_draft_n_min: int = _default("spec-draft-n-min")  # fewest: the adaptive draft length stays at or above it
    draft_p_min: float = _default("draft-p-min")  # a row stops proposing at a draft token less probable (0 = never)
    spec_type: list[str] = Field(default_factory=list)  # --spec-type: draft-simple and the n-gram types
    spec_ngram_simple_size_n: int = _default("spec-ngram-simple-size-n")  # tokens looked up in the history
    spec_ngram_simple_size_m: int = _default("spec-ngram-simple-size-m")  # most tokens proposed after a match
    spec_ngram_map_k_size_n: int = _default("spec-ngram-map-k-size-n")  # ngram-map-k: tokens looked up
    spec_ngram_map_k_size_m: int = _default("spec-ngram-map-k-size-m")  # most tokens proposed after a match
    spec_ngram_map_k_min_hits: int = _default("spec-ngram-map-k-min-hits")  # (b10621 reads it for k4v only)
    spec_ngram_map_k4v_size_n: int = _default("spec-ngram-map-k4v-size-n")  # ngram-map-k4v: likewise
    spec_ngram_map_k4v_size_m: int = _default("spec-ngram-map-k4v-size-m")
    spec_ngram_map_k4v_min_hits: int = _default("spec-ngram-map-k4v-min-hits")  # lookups of a key before it proposes
    spec_ngram_mod_n_match: int = _default("spec-ngram-mod-n-match")  # ngram-mod: tokens hashed per lookup
    spec_ngram_mod_n_min: int = _default("spec-ngram-mod-n-min")  # fewest tokens it proposes (else none)
    spec_ngram_mod_n_max: int = _default("spec-ngram-mod-n-max")  # most tokens it proposes
    lookup_cache_static: str | None = None  # ngram-cache: llama.cpp lookup-cache files, read once at load
    lookup_cache_dynamic: str | None = None
    # Not an option: requests that may wait for a slot before new ones are refused.
    queue_max: int = 256

    @classmethod
    def of(cls, cfg: "Config", given: Collection[str] = frozenset()) -> "WorkerSettings":
        """The worker's slice of a Config: every field that names an option, copied by name (the cache types only
        when they are among the ``given`` option names)."""
        values = {name: getattr(cfg, name) for name in cls.model_fields if name != "queue_max"}
        for name in ("cache_type_k", "cache_type_v", "cache_type_k_draft", "cache_type_v_draft"):
            if name.replace("_", "-") not in given:
                values[name] = None
        return cls(**values)

    @property
    def pin_cpu(self) -> bool:
        """Whether to keep the worker thread and its MLX stream thread on one CPU (see engine.cpu.affinity)."""
        return self.worker_affinity == "auto"

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
        return None if self.cache_ram < 0 else self.cache_ram * 1024 * 1024
