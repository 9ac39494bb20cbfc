"""llama-server's print-and-exit options: ``--help``, ``--version``, ``--list-devices``, ``--cache-list`` and
``--completion-bash``, acted on before anything is served.

As upstream, ``--version``, ``--list-devices`` and ``--cache-list`` act where they stand on the command line (the
first one wins); ``--help`` and then ``--completion-bash`` act once the whole line has been read.
"""

from __future__ import annotations

import os
import sys

IMMEDIATE = ("version", "list-devices", "cache-list")
AFTER_PARSE = ("usage", "completion-bash")


def early_exit(argv: list[str]) -> int | None:
    """Print what a print-and-exit option asks for and return the exit status; None when there is none."""
    from mlxd.config import table
    from mlxd.config.prepass import prepass

    options = table()
    named = [options.by_spelling[t.text].name for t in prepass(argv, options)
             if t.role == "option" and t.text in options.by_spelling]
    action = next((n for n in named if n in IMMEDIATE), None) or next((n for n in AFTER_PARSE if n in named), None)
    if action is None:
        return None
    if action == "cache-list":
        return _cache_list(argv)
    sys.stdout.write(_TEXT[action]())
    return 0


def _version() -> str:
    from mlxd import __version__

    return f"mlxd {__version__} (llama-server b10621 command line)\n"


def _usage() -> str:
    from mlxd.config.render import help_text

    return help_text()


def _completion() -> str:
    from mlxd.config.completion import bash_completion

    return bash_completion()


def _list_devices() -> str:
    """b10621's device list, one line per device MLX can run on (the default one first)."""
    from mlxd.engine import MIB, available_devices

    lines = ["Available devices:"]
    lines += [f"  {d.name}: {d.description} ({d.total // MIB} MiB, {d.free // MIB} MiB free)"
              for d in available_devices()] or ["  (none)"]
    return "\n".join(lines) + "\n"


def _cache_list(argv: list[str]) -> int:
    """b10621's cache listing: the model store's MLX checkpoints (``--model-store-root``, else the hub cache)."""
    from mlxd.config import resolve
    from mlxd.engine import cached_models

    store_root = resolve(argv, dict(os.environ)).config.model_store_root  # a bad command line is reported as such
    models = sorted(cached_models(store_root))
    lines = [f"number of models in cache: {len(models)}"] + [f"{i:4d}. {m}" for i, m in enumerate(models, 1)]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


_TEXT = {"version": _version, "usage": _usage, "completion-bash": _completion, "list-devices": _list_devices}
