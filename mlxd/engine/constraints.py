"""Constrained decoding for one loaded model: llguidance's tokenizer and compiler, built on first use (about a
second for a large vocabulary, so never at load and never twice). engine.constrain is imported only then."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlxd.engine.constrain import CompiledConstraint, ConstraintCompiler, ConstraintSpec, Matcher


class Constraints:
    """The model's constraint compiler and the matchers its requests decode under."""

    def __init__(self, tokenizer: object, n_vocab: int, eos_ids: list[int]) -> None:
        self._source, self._n_vocab, self._eos = tokenizer, n_vocab, eos_ids
        self._lock = threading.Lock()
        self._compiler: ConstraintCompiler | None = None

    @property
    def compiler(self) -> ConstraintCompiler:
        """The model's ``ConstraintCompiler`` (the api may compile ahead of ``submit`` with it)."""
        from mlxd.engine.constrain import ConstraintCompiler, build_tokenizer

        with self._lock:
            if self._compiler is None:
                tokenizer = build_tokenizer(self._source, n_vocab=self._n_vocab, eos_token_ids=self._eos)
                self._compiler = ConstraintCompiler(tokenizer)
            return self._compiler

    def matcher(self, constraint: ConstraintSpec | CompiledConstraint) -> Matcher:
        """A fresh Matcher for a ConstraintSpec or CompiledConstraint (ConstraintError when it cannot compile)."""
        from mlxd.engine.constrain import CompiledConstraint, Matcher

        compiler = self.compiler
        compiled = constraint if isinstance(constraint, CompiledConstraint) else compiler.compile(constraint)
        return Matcher(compiled, compiler.tokenizer)
