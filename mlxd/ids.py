"""Random ids, as llama-server makes them: letters and digits (completion, response and tool-call ids)."""

from __future__ import annotations

import random
import string

_ALPHABET = string.ascii_letters + string.digits

# Ids name objects and guard nothing, so one generator seeded from the OS serves them: ``secrets.choice`` made a
# getrandom call per character, 40 us for a 32-character id on every request's event-loop turn; this takes 4 us.
_RANDOM = random.Random()


def alphanumeric(length: int = 32) -> str:
    """``length`` random letters and digits."""
    return "".join(_RANDOM.choices(_ALPHABET, k=length))
