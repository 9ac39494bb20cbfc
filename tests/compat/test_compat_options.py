"""The options manifest against the real parser, both ways, over the packaged b10621 inventory.

Every spelling and env name of every b10621 option parses with a valid value: it acts, is inert, or is refused
with its diagnostic, never "invalid argument". Every accepted spelling has a manifest entry, every entry's claim
matches the option table, and every entry's pinning test exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlxd.compat.manifest import Entry, Manifest, Rationale, available_kinds, divergence_of, load, rationale_of, validate
from mlxd.compat.seed import PINS, is_gap, is_policy
from mlxd.config import ConfigError, Kind, OptionSpec, ValueType, resolve, table
from mlxd.config.options import inventory, upstream_name

REPO_ROOT = Path(__file__).resolve().parents[2]
B10621 = [spec for spec in table() if spec.origin == "b10621"]
PARSES = PINS["deferred"]


def _files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "models").mkdir(exist_ok=True)
    (tmp_path / "p.ini").write_text("[a]\nmodel = /a\n")
    return {"models-dir": str(tmp_path / "models"), "models-preset": str(tmp_path / "p.ini")}


def valid_text(spec: OptionSpec, files: dict[str, str]) -> list[str]:
    """A valid value for ``spec`` as command-line words; its default where it has one."""
    if spec.name in files:
        return [files[spec.name]]
    if spec.value_type is ValueType.PAIR:
        return ["0", "1"]
    if spec.domain == "json_object":
        return ['{"enable_thinking": false}']
    if spec.domain == "logit_bias":
        return ["15043+1"]
    if spec.value_type is ValueType.SCALED:
        return ["adapter:0.5"]
    default = spec.default
    if isinstance(default, list):
        return [",".join(default)] if default else ["a"]
    if default is None:
        return [{ValueType.INT: "1", ValueType.FLOAT: "0.5"}.get(spec.value_type, (spec.choices or ("x",))[0])]
    return [str(default)]


def other_text(spec: OptionSpec) -> list[str]:
    """A valid value other than the default (and outside any inert set), to exercise refusals."""
    if spec.value_type is ValueType.PAIR:
        return ["0", "1"]
    if spec.domain == "ggml_type":
        return ["q8_0"]
    if spec.domain == "ngl":
        return ["5"]
    if spec.domain == "percent":
        return ["7"]
    if spec.choices:
        return [next(c for c in spec.choices if c != spec.default and c not in (spec.inert_values or ()))]
    if spec.value_type is ValueType.INT:
        return [str(int(spec.maximum) if spec.maximum is not None and spec.maximum < 7 else 7)]
    if spec.value_type is ValueType.FLOAT:
        return ["0.375"]
    return ["other-value"]


def _outcome(argv: list[str], env: dict[str, str], spec: OptionSpec, source: str) -> str:
    """'acts' when the value is in force with the expected provenance, 'refused' when refused with the option's
    own diagnostic; anything else fails."""
    try:
        resolved = resolve(argv, env, read_config_ini=False)
    except ConfigError as exc:
        for problem in exc.problems:
            assert "invalid argument" not in problem.message, problem.render()
            assert problem.option == spec.name and problem.source == source, problem.render()
            assert "not supported by mlxd" in problem.message, problem.render()
        return "refused"
    assert resolved.provenance[spec.name] == source
    return "acts"


@pytest.mark.parametrize("spec", B10621, ids=[s.name for s in B10621])
def test_every_spelling_parses(spec: OptionSpec, tmp_path: Path) -> None:
    files = _files(tmp_path)
    for spelling in spec.spellings:
        argv = [spelling] + (valid_text(spec, files) if spec.takes_value else [])
        outcome = _outcome(argv, {}, spec, f"cli:{spelling}")
        if outcome == "refused":  # only options the table says may refuse
            assert spec.treatment in ("refuse", "removed") or spec.inert_values or spec.check, spelling


@pytest.mark.parametrize("spec", [s for s in B10621 if s.env], ids=[s.name for s in B10621 if s.env])
def test_every_env_name_parses(spec: OptionSpec, tmp_path: Path) -> None:
    files = _files(tmp_path)
    for name in spec.env:
        text = "1" if spec.is_bool else " ".join(valid_text(spec, files))
        assert _outcome([], {name: text}, spec, f"env:{name}") in ("acts", "refused")
    if spec.env_negative:  # rule 1.7: existence alone disables
        assert _outcome([], {spec.env_negative: ""}, spec, f"env:{spec.env_negative}") in ("acts", "refused")


NA = [s for s in B10621 if load("options").by_id()[s.name].state == "not_applicable"]
GAPS = [s for s in B10621 if is_gap(s)]
POLICIES = [s for s in B10621 if is_policy(s)]


def _refused_or_inert(spec: OptionSpec) -> None:
    spelling = spec.long[-1] if spec.long else spec.spellings[-1]
    argv = [spelling] + (other_text(spec) if spec.takes_value else [])
    if spec.kind is Kind.BOOL_PAIR:  # the spelling that sets the value outside the inert set, or not the default
        refused_value = spec.inert_values != ("true",) if spec.inert_values else not spec.default
        spelling = spec.long[-1] if refused_value else spec.negatives[-1]
        argv = [spelling]
    outcome = _outcome(argv, {}, spec, f"cli:{spelling}")
    if spec.check == "ngl":  # a count is refused against the checkpoint's layer count, before its weights are read
        assert outcome == "acts"
        _ngl_refused_at_load(spec, argv[-1])
    elif spec.treatment == "inert" and spec.inert_values is None:
        assert outcome == "acts"
    else:
        assert outcome == "refused"


def _ngl_refused_at_load(spec: OptionSpec, count: str) -> None:
    import tempfile

    from mlxd.engine.loading import placement
    from mlxd.errors import EngineError

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "config.json").write_text('{"num_hidden_layers": %d}' % (int(count) + 1))
        with pytest.raises(EngineError, match=f"{spec.name}={count}: not supported by mlxd: partial GPU offload"):
            placement.check(Path(tmp), count, None, on_gpu=True, what="draft" if "draft" in spec.name else "model")


@pytest.mark.parametrize("spec", NA, ids=[s.name for s in NA])
def test_not_applicable_options_are_refused_or_inert(spec: OptionSpec) -> None:
    """A non-default value is refused with the option's diagnostic, unless every value is inert."""
    _refused_or_inert(spec)


@pytest.mark.parametrize("spec", GAPS, ids=[s.name for s in GAPS])
def test_gap_options_are_refused_or_inert_until_they_work(spec: OptionSpec) -> None:
    """An option mlxd lacks the feature for is refused (or ignored) as a not_applicable one is, its manifest
    entry is deferred, and its reason says "not yet" rather than that MLX has no counterpart."""
    _refused_or_inert(spec)
    assert load("options").by_id()[spec.name].state == "deferred"
    assert spec.reason is not None and "not yet" in spec.reason[0] and "counterpart" not in spec.reason[0]


@pytest.mark.parametrize("spec", POLICIES, ids=[s.name for s in POLICIES])
def test_policy_options_are_refused_by_design(spec: OptionSpec) -> None:
    """llama-server web UI's agent tools and MCP proxy options are refused with their diagnostic, and their
    manifest entry records that as a permanent difference: by_design, not "no MLX equivalent"."""
    _refused_or_inert(spec)
    entry = load("options").by_id()[spec.name]
    assert entry.state == "by_design" and entry.basis == ""
    assert spec.reason is not None and spec.reason[0] in entry.divergence_text
    assert entry.rationale is not None and entry.rationale.kind == "policy" and entry.rationale.revisit_if


def test_manifest_covers_every_accepted_spelling_and_nothing_else() -> None:
    manifest = load("options").by_id()
    accepted = {s: spec.name for spec in B10621 for s in spec.spellings}
    claimed = {s: e.id for e in manifest.values() for s in e.upstream["spellings"]}
    assert accepted == claimed
    assert set(manifest) == {upstream_name(e) for e in inventory()}
    assert len(manifest) == 249


def test_manifest_states_match_the_table() -> None:
    for entry in load("options").entries:
        spec = table().get(entry.id)
        refuses = spec.treatment in ("refuse", "removed", "inert") or spec.check in ("ngl", "device")
        assert (entry.state == "not_applicable") == (refuses and not is_gap(spec) and not is_policy(spec)), entry.id
        assert (entry.state == "by_design") >= is_policy(spec), entry.id
        # The manifest holds the state; the table only ever claims support the manifest confirms.
        assert spec.treatment != "supported" or entry.state == "supported", entry.id


def test_the_validator_rejects_a_not_applicable_entry_that_is_an_mlxd_gap() -> None:
    """not_applicable means "no MLX equivalent": it needs a basis from the vocabulary, and a divergence that says a
    feature is not yet implemented makes it a deferred entry."""
    up = {"spellings": ["--x"]}
    cases = {
        "no-basis": Entry("x", "not_applicable", up, ("a ggml thread pool knob",), "t::t"),
        "gap-words": Entry("x", "not_applicable", up, ("speculative decoding is not implemented",), "t::t",
                           basis="ggml"),
        "basis-on-deferred": Entry("x", "deferred", up, ("not yet wired",), "t::t", basis="ggml"),
    }
    for name, entry in cases.items():
        assert validate(Manifest("options", "b10621", (entry,))), name
    fine = Entry("x", "not_applicable", up, ("a ggml thread pool knob",), "t::t", basis="ggml")
    assert validate(Manifest("options", "b10621", (fine,))) == []


def test_the_validator_holds_by_design_rationales_and_divergence_lists() -> None:
    """A by_design entry says why its difference is permanent (kind, reason, and revisit_if for a policy); no other
    state carries a rationale; a supported entry has no divergence; a divergence is a list of differences."""
    up = {"spellings": ["--x"]}
    policy = Rationale("policy", "mlxd's choice", "clients need it")
    cases = {
        "by_design-without-rationale": Entry("x", "by_design", up, ("answers 400 where b10621 answers 500",), "t::t"),
        "policy-without-revisit": Entry("x", "by_design", up, ("differs",), "t::t",
                                        rationale=Rationale("policy", "mlxd's choice")),
        "unknown-kind": Entry("x", "by_design", up, ("differs",), "t::t", rationale=Rationale("taste", "why")),
        "no-reason": Entry("x", "by_design", up, ("differs",), "t::t", rationale=Rationale("architectural", " ")),
        "rationale-on-deferred": Entry("x", "deferred", up, ("not wired",), "t::t", rationale=policy),
        "rationale-on-supported": Entry("x", "supported", up, (), "t::t", rationale=policy),
        "supported-with-divergence": Entry("x", "supported", up, ("differs",), "t::t"),
        "empty-difference": Entry("x", "by_design", up, ("differs", ""), "t::t", rationale=policy),
    }
    for name, entry in cases.items():
        assert validate(Manifest("options", "b10621", (entry,))), name
    for rationale in (policy, Rationale("architectural", "MLX stores it so")):
        fine = Entry("x", "by_design", up, ("answers 400 where b10621 answers 500",), "t::t", rationale=rationale)
        assert validate(Manifest("options", "b10621", (fine,))) == []
    with pytest.raises(ValueError, match="list of strings"):
        divergence_of("prose in one string")
    with pytest.raises(ValueError, match="rationale must be an object"):
        rationale_of({"kind": "policy", "reason": "r", "why": "unknown key"})


def test_every_by_design_entry_of_every_kind_has_a_rationale() -> None:
    for kind in available_kinds():
        for entry in load(kind).entries:
            assert (entry.rationale is not None) == (entry.state == "by_design"), (kind, entry.id)


@pytest.mark.parametrize("kind", available_kinds())
def test_manifest_is_well_formed_and_every_pinning_test_exists(kind: str) -> None:
    """No supported entry carries a divergence, every other one says what differs, and every entry's pinning
    test resolves to a test function (and its parameter, when named) in the repository."""
    assert validate(load(kind), REPO_ROOT) == []


def test_ignored_options_are_never_claimed() -> None:
    """An option whose value nothing outside the configuration layer reads is deferred or not applicable."""
    read = "\n".join(p.read_text(encoding="utf-8") for p in (REPO_ROOT / "mlxd").rglob("*.py")
                     if not {"config", "compat"} & set(p.relative_to(REPO_ROOT / "mlxd").parts[:1]))
    for entry in load("options").entries:
        # A policy entry claims a refusal, which the configuration layer makes (its own test holds it).
        if entry.state in ("supported", "by_design") and entry.test not in (PARSES, PINS["policy"]):
            spec = table().get(entry.id)
            names = {spec.field, spec.name, *(s.lstrip("-") for s in spec.long)}
            assert any(re.search(rf"\b{re.escape(n)}\b", read) for n in names), entry.id


