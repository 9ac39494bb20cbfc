"""Effects follow from readers (design principle 3a): what the option table declares a change of an option does
must agree with the code that reads it.

The load path reads the configuration through one typed translation, :meth:`mlxd.engine.spec.ModelSpec.of`; it is
traced here with a Config that records every field read. What it reads is read when a model loads, so a change
reloads the model, except the parts the reconcile path re-reads live (daemon.served.refresh): the sampling
defaults and the served name (``live``), the chat template (``template``) and the adapters' scales (``adapters``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest

from mlxd.config import Config, table
from mlxd.config.options import OptionSpec
from mlxd.engine.sampling.defaults import sampling_defaults
from mlxd.engine.spec import ModelSpec, TemplateSpec


class Recorder:
    """A Config that notes each field read (pydantic keeps field values in the instance, so a proxy it is)."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        if name in Config.model_fields:
            self.read.add(name)
        return getattr(self._config, name)


def reads(reader: Callable[[Config], object], config: Config | None = None) -> set[str]:
    """The Config fields ``reader`` reads."""
    recorder = Recorder(config or Config(model="m"))
    reader(cast(Config, recorder))
    return recorder.read


def by_field() -> dict[str, OptionSpec]:
    return {spec.field: spec for spec in table()}


LOAD = reads(ModelSpec.of) | reads(ModelSpec.of, Config(model="m", model_draft="d"))
LIVE = reads(sampling_defaults) | {"alias"}  # daemon.served.refresh re-reads these on every live change
TEMPLATE = reads(TemplateSpec.of)
ADAPTERS = {"lora", "lora_scaled", "lora_init_without_apply"}


def expected_effect(field: str) -> str:
    """What a change of an option the load path reads must do."""
    for effect, fields in (("live", LIVE), ("template", TEMPLATE), ("adapters", ADAPTERS)):
        if field in fields:
            return effect
    return "reload"


def test_the_trace_sees_the_load_path() -> None:
    assert {"ctx_size", "model", "spec_draft_n_max", "rope_freq_base", "temperature", "mmproj_auto",
            "model_draft", "chat_template", "lora_scaled"} <= LOAD


@pytest.mark.parametrize("field", sorted(LOAD))
def test_an_option_read_when_a_model_loads_declares_what_its_reader_does(field: str) -> None:
    spec = by_field()[field]
    want = expected_effect(field)
    assert want in spec.effects, (f"{spec.name} is read when a model loads ({want}), but the option table says a "
                                  f"change is {', '.join(spec.effects)}: give its row effect={want}")


@pytest.mark.parametrize("spec", [s for s in table() if "reload" in s.effects], ids=lambda s: s.name)
def test_an_option_declared_reload_is_read_when_a_model_loads(spec: OptionSpec) -> None:
    """The converse: a reload whose options nothing at load reads would reload for nothing."""
    assert spec.field in LOAD or spec.field in RELOAD_ELSEWHERE, f"{spec.name}: effect=reload, read by no loader"


# Read when a model loads, outside ModelSpec: the router pool's own limits, and the preflight's checks.
RELOAD_ELSEWHERE: set[str] = set()
