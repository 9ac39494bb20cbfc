"""llama.cpp b10621's sampling chain on MLX logits: parameters, per-request samplers and the batched step."""

from mlxd.engine.sampling.batch import sample_batch
from mlxd.engine.sampling.chain import SampledToken, TokenCandidate, TokenSampler
from mlxd.engine.sampling.params import (
    DEFAULT_DRY_BREAKERS,
    DEFAULT_SAMPLERS,
    DEFAULT_SEED,
    InvalidRequest,
    SamplingParams,
    SamplingVocab,
)
from mlxd.engine.sampling.request import apply_request, json_type_name, read_bool, read_number

__all__ = [
    "DEFAULT_DRY_BREAKERS",
    "DEFAULT_SAMPLERS",
    "DEFAULT_SEED",
    "InvalidRequest",
    "SampledToken",
    "SamplingParams",
    "SamplingVocab",
    "TokenCandidate",
    "TokenSampler",
    "apply_request",
    "json_type_name",
    "read_bool",
    "read_number",
    "sample_batch",
]
