"""Stands in for llama-server under llama.cpp's own server test suite (tools/server/tests, utils.py's ServerProcess).

The suite starts ``$LLAMA_SERVER_BIN_PATH`` with a model named by ``--hf-repo``/``--hf-file`` (a download on
upstream's CI). Nothing is downloaded here: each preset's repository is mapped to a local checkpoint of the same
kind, and every other argument goes through unchanged, so the server under test sees the suite's own options.

    UPSTREAM_TARGET=mlxd   exec ``mlxd-server`` (beside this interpreter) on the synthetic checkpoints in
                           ``$UPSTREAM_MODELS/{chat,embed,qwen3-reranker,infill}`` (made by tests/upstream/run.py;
                           chat is llama-vocabulary, the others Qwen3-shaped)
    UPSTREAM_TARGET=llama  exec ``$LLAMA_SERVER`` on ``$UPSTREAM_GGUF`` for every preset (the reference figure)
    UPSTREAM_CHAT_MODEL    (mlxd) serve the chat presets from this checkpoint instead

It replaces itself with the server (``exec``), so the suite's SIGTERM and exit codes reach the real process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Preset repositories (utils.py's ServerPreset and the tests' own) by the kind of model they need; anything else is
# a chat model: the llama-vocabulary checkpoint, as the stories260K presets most tests use are llama models and
# llama-server's reference run serves a llama GGUF for every preset. The vision preset (tinygemma3) gets the chat
# model too: image input is issue #12's.
KINDS: tuple[tuple[str, str], ...] = (
    ("bert-bge-small", "embed"),
    ("jina-reranker", "qwen3-reranker"),  # the directory's name is the hint that marks a Qwen3 reranker
    ("stories260K-infill", "infill"),
)

# Arguments the suite passes that mlxd refuses although the behaviour they ask for is what the suite tests anyway.
# ``--no-jinja`` is passed to every server not started with ``jinja = True``; llama-server then renders chat with
# its built-in templates and mlxd (which refuses --no-jinja; #11 templates owns that) with the checkpoint's own.
MLXD_DROPPED = ("--no-jinja",)


def model_kind(repo: str, file: str | None) -> str:
    """The kind of checkpoint a preset's ``--hf-repo``/``--hf-file`` pair names."""
    name = f"{repo}/{file or ''}"
    for marker, kind in KINDS:
        if marker in name:
            return kind
    return "chat"


def translate(argv: list[str], target: str, models: Path, gguf: str | None) -> list[str]:
    """The suite's llama-server arguments with each hub model replaced by a local one (``-m PATH``)."""
    out: list[str] = []
    repo: str | None = None
    file: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--hf-repo", "-hf", "-hfr"):
            repo, i = argv[i + 1], i + 2
            continue
        if arg in ("--hf-file", "-hff"):
            file, i = argv[i + 1], i + 2
            continue
        if target == "mlxd" and arg in MLXD_DROPPED:
            i += 1
            continue
        out.append(arg)
        i += 1
    if repo is not None:
        kind = model_kind(repo, file)
        chat = os.environ.get("UPSTREAM_CHAT_MODEL")  # another chat checkpoint (say, a llama-vocabulary one)
        model = gguf if target == "llama" else chat if chat and kind == "chat" else str(models / kind)
        if model is None:
            raise SystemExit("shim: UPSTREAM_GGUF is not set")
        out = ["-m", model, *out]
    return out


def main() -> None:
    target = os.environ.get("UPSTREAM_TARGET", "mlxd")
    models = Path(os.environ.get("UPSTREAM_MODELS", "."))
    args = translate(sys.argv[1:], target, models, os.environ.get("UPSTREAM_GGUF"))
    if target == "llama":
        binary = os.environ["LLAMA_SERVER"]
    else:
        binary = str(Path(sys.executable).with_name("mlxd-server"))
    print(f"shim: {binary} {' '.join(args)}", file=sys.stderr, flush=True)
    os.execv(binary, [binary, *args])


if __name__ == "__main__":
    main()
