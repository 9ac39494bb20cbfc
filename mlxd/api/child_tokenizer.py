"""Very long texts tokenized in a child process, so that the GIL stays free for the event loop.

The Rust tokenizer releases the GIL while it encodes, but handing its ids to Python builds one int object per
token holding the GIL: 80 ms for the 4 million tokens of a 10 MB text, during which no other thread (the event
loop's ``/health`` included) runs. A child process builds that list under its own GIL and writes the ids as raw
32-bit integers; the parent turns them into a list in small chunks, between which the other threads run.

The child is one per such text (``python -P .../child_tokenizer.py``): it needs no lifecycle, and its memory
(the encoding of a 10 MB text is hundreds of MB) goes back to the system when it exits. Its start (about 0.1 s)
is small against the seconds the text takes to tokenize. This module imports only the standard library and
``tokenizers`` at its top, so that the child starts quickly; the child runs it by its path, not as
``-m mlxd.api.child_tokenizer``, which would first import the packages mlxd and mlxd.api (sanic, pydantic, the
routes: about 2 s of CPU per child), and with ``-P``, so that its own folder (mlxd/api/) is not put on sys.path.
"""

from __future__ import annotations

import logging
import os
import struct
import subprocess
import sys
from array import array
from pathlib import Path

from tokenizers import Tokenizer

log = logging.getLogger("mlxd.api")

# Texts from this many characters on go to a child (in process, its ids take ~30 ms of GIL).
CHILD_CHARS = 4_000_000
_CHUNK = 1 << 16
_HEADER = struct.Struct("<QBQ")  # tokenizer JSON bytes, flags, text bytes
_ADD_SPECIAL, _PLAIN_TEXT = 1, 2
_CHILD_SCRIPT = str(Path(__file__).resolve())


def _as_list(ids: array) -> list[int]:
    """The ids as a list, built in chunks so that other threads get the GIL in between."""
    out: list[int] = []
    for start in range(0, len(ids), _CHUNK):
        out += ids[start:start + _CHUNK].tolist()
    return out


# The last tokenizers' serialized form (a few MB each, and serializing holds the GIL): kept for the next text.
_specs: dict[int, tuple[Tokenizer, bytes]] = {}
_SPECS_KEPT = 2


def _spec(tokenizer: Tokenizer) -> bytes:
    kept = _specs.get(id(tokenizer))
    if kept is None or kept[0] is not tokenizer:
        while len(_specs) >= _SPECS_KEPT:
            del _specs[next(iter(_specs))]
        kept = _specs[id(tokenizer)] = (tokenizer, tokenizer.to_str().encode())
    return kept[1]


def _in_child(tokenizer: Tokenizer, text: str, add_special: bool) -> array | str:
    """The ids a child process computes, or why it could not."""
    raw = text.encode("utf-8", errors="surrogatepass")
    spec = _spec(tokenizer)
    flags = (_ADD_SPECIAL if add_special else 0) | (_PLAIN_TEXT if tokenizer.encode_special_tokens else 0)
    try:
        done = subprocess.run([sys.executable, "-P", _CHILD_SCRIPT],
                              input=_HEADER.pack(len(spec), flags, len(raw)) + spec + raw, capture_output=True,
                              check=False)
    except OSError as e:
        return str(e)
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"exit status {done.returncode}"
    ids = array("I")
    ids.frombytes(done.stdout)
    return ids


def encode(tokenizer: Tokenizer, text: str, *, add_special: bool) -> list[int]:
    """``text``'s ids from ``tokenizer`` (with its special tokens when ``add_special``): in a child for a long
    text, in this process otherwise, or when no child can run."""
    if len(text) >= CHILD_CHARS:
        ids = _in_child(tokenizer, text, add_special)
        if isinstance(ids, array):
            return _as_list(ids)
        log.warning("tokenizing a %d-character text in a child process failed (%s); tokenizing it here",
                    len(text), ids)
    found: list[int] = tokenizer.encode_batch_fast([text], add_special_tokens=add_special)[0].ids  # a new list
    return found


# The child's niceness: its seconds of tokenizing are bulk work, and on a machine with few cores it would otherwise
# take the core that the parent's event loop and model workers need to answer everyone else.
_CHILD_NICENESS = 10


def _child() -> int:
    try:
        os.nice(_CHILD_NICENESS)
    except OSError:  # not permitted or not supported: tokenize at the parent's priority
        pass
    data = sys.stdin.buffer.read()
    spec_len, flags, text_len = _HEADER.unpack_from(data)
    start = _HEADER.size
    tokenizer = Tokenizer.from_str(data[start:start + spec_len].decode())
    tokenizer.encode_special_tokens = bool(flags & _PLAIN_TEXT)
    text = data[start + spec_len:start + spec_len + text_len].decode("utf-8", errors="surrogatepass")
    del data
    ids = tokenizer.encode_batch_fast([text], add_special_tokens=bool(flags & _ADD_SPECIAL))[0].ids
    sys.stdout.buffer.write(array("I", ids).tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(_child())
