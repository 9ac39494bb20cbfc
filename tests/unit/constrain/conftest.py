from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.engine.constrain import ConstraintCompiler, ConstraintTokenizer, build_tokenizer


@pytest.fixture(scope="session")
def ctok(tiny_checkpoint: Path) -> ConstraintTokenizer:
    """llguidance's tokenizer for the tiny checkpoint's vocabulary, padded to a wider output layer."""
    return build_tokenizer(tiny_checkpoint, n_vocab=2100)


@pytest.fixture(scope="session")
def ccompiler(ctok: ConstraintTokenizer) -> ConstraintCompiler:
    return ConstraintCompiler(ctok)
