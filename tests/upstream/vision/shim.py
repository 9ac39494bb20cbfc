#!/usr/bin/env python3
"""Stands in for llama-server under llama.cpp's test_vision_api.py: the suite's hub model becomes a local synthetic
checkpoint (``$VISION_MODEL`` for the vision preset, ``$TEXT_MODEL`` for any other), every other argument goes to
``mlxd-server`` unchanged except ``--no-jinja`` (mlxd renders with Jinja only), and the shim execs the server."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def translate(argv: list[str]) -> list[str]:
    out: list[str] = []
    repo = None
    i = 0
    while i < len(argv):
        if argv[i] in ("--hf-repo", "-hf", "-hfr", "--hf-file", "-hff"):
            repo = repo or argv[i + 1] if argv[i] in ("--hf-repo", "-hf", "-hfr") else repo
            i += 2
            continue
        if argv[i] != "--no-jinja":
            out.append(argv[i])
        i += 1
    if repo is not None:
        model = os.environ["VISION_MODEL"] if "gemma3" in repo else os.environ["TEXT_MODEL"]
        out = ["-m", model, *out]
    return out


if __name__ == "__main__":
    binary = os.environ.get("MLXD_SERVER") or str(Path(sys.executable).with_name("mlxd-server"))
    args = [binary, *translate(sys.argv[1:]), "--admin-listen", "off"]
    print("shim:", " ".join(args), file=sys.stderr, flush=True)
    os.execv(binary, args)
