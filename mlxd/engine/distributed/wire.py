"""The scheduler's inputs as bytes between ranks, and between the front end and its rank-0 process.

Requests are dataclasses and pydantic models of mlxd.engine (sampling parameters, constraint and reasoning specs),
which pickle as they are; unpickling is held to those modules and a few builtins, so bytes from a peer can name
no other callable (a plain pickle would run whatever a forged payload names).
"""

from __future__ import annotations

import io
import pickle
from typing import Any

_ALLOWED_MODULES = ("mlxd.engine.", "mlxd.errors", "collections", "pathlib", "datetime")
_ALLOWED_BUILTINS = frozenset({"set", "frozenset", "tuple", "list", "dict", "complex", "bytearray", "slice",
                                "range", "object", "int", "float", "str", "bytes", "bool"})


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _ALLOWED_BUILTINS:
            return super().find_class(module, name)
        if module == "copyreg" and name in ("_reconstructor", "__newobj__"):
            return super().find_class(module, name)
        if module.startswith(_ALLOWED_MODULES):
            found = super().find_class(module, name)
            # Only types: a function of those modules (one that writes a file, say) is as dangerous as any other.
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"refused: {module}.{name} is not part of mlxd's engine")


def dumps(value: object) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    return _Restricted(io.BytesIO(data)).load()
