"""mlx's fused CPU kernels built for the machine's CPU: ``--cpu-jit``.

mlx's CPU backend compiles each fused run of elementwise operations (what ``mx.compile`` makes of the decode step,
mlx-lm's SwiGLU) with ``g++ -std=c++17 -O3 -fPIC -shared`` for a generic x86-64, as a loop of one element at a time
that calls mlx's ``exp`` out of line, which calls libm's ``fmaf`` through the PLT at each step of its polynomial:
SwiGLU's kernel costs 38 ns an element on a Sapphire Rapids Xeon. Built for the CPU (``-march=native``), with the
``exp`` inlined (``-finline-limit``) and the loop free to run vectorised (``-fno-trapping-math``: FP exceptions are
not observed, so nothing else changes), it costs 1.4 ns, with the same bits (docs/benchmarks.md, section 9; none of
the flags lets the compiler reorder or contract arithmetic, and a test holds the bits).

mlx runs ``g++`` by name through the shell and keeps what it builds under ``$TMPDIR/mlx/<version>/cpu``, each
library named by its kernel alone. So mlxd puts a ``g++`` of its own first on ``PATH``, which adds those flags,
and points ``TMPDIR`` at a directory of its cache kept per compiler and CPU: a generic build in ``/tmp/mlx`` is never
taken for a native one, nor a build for one CPU by a daemon on another that shares the cache. The directory outlives
reboots, so a restarted daemon does not build its kernels again. Python's temporary files in the daemon go there
too. This module must not import mlx (it runs before mlx reads ``TMPDIR``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mlxd.engine.cpu.blas_kernel import cpu_identity
from mlxd.engine.cpu.gemv_shim import cache_dir
from mlxd.errors import EngineError

log = logging.getLogger("mlxd.engine.cpu.jit")

JitMode = Literal["auto", "off"]
JIT_MODES: tuple[JitMode, ...] = ("auto", "off")

# What mlxd's g++ adds to mlx's command line. -ffp-contract stays as mlx's -std=c++17 sets it (off): no new fused
# multiply-adds, so the bits are mlx's own.
FLAGS = ("-march=native", "-fno-trapping-math", "-finline-limit=1000")
_FLAGS = " ".join(FLAGS)


@dataclass(frozen=True)
class JitReport:
    """What ``prepare`` did: the directory mlx builds its kernels in (None: as mlx does) and a line for the log."""

    directory: Path | None
    note: str


def prepare(mode: JitMode, *, compiler: str | None = None) -> JitReport:
    """Have mlx build its fused CPU kernels for this CPU, where ``mode`` is auto and the compiler can; logs what it did.

    Call before mlx compiles anything; it changes this process's ``PATH`` and ``TMPDIR`` (its children inherit them).
    ``compiler`` is the ``g++`` mlx would run, found on ``PATH`` when not given."""
    report = _prepare(mode, compiler)
    log.info("%s", report.note)
    return report


def _prepare(mode: JitMode, compiler: str | None) -> JitReport:
    if mode not in JIT_MODES:
        raise EngineError(f"cpu-jit: unknown mode {mode!r}; choose auto or off")
    if mode == "off":
        return JitReport(None, "cpu-jit off: mlx builds its fused CPU kernels for a generic CPU")
    if not sys.platform.startswith("linux"):
        return JitReport(None, "cpu-jit auto: not on Linux, mlx's kernels as mlx builds them")
    real = compiler or shutil.which("g++")
    if real is None:
        return JitReport(None, "cpu-jit auto: no g++ on PATH, so mlx runs its CPU operations unfused")
    try:
        home = _home(real)
    except OSError as exc:
        return JitReport(None, f"cpu-jit auto: mlx's kernels as mlx builds them ({exc})")
    os.environ["PATH"] = f"{home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ["TMPDIR"] = str(home / "tmp")
    return JitReport(home, f"cpu-jit auto: mlx's fused CPU kernels built for this CPU ({real} {_FLAGS}) in {home}")


def _home(real: str) -> Path:
    """The directory for ``real`` on this CPU: ``bin/g++``, the wrapper, and ``tmp``, mlx's ``TMPDIR``.

    Raises OSError where the compiler does not take the flags or the directory cannot be written."""
    probe = subprocess.run([real, *FLAGS, "-x", "c++", "-E", "-o", os.devnull, os.devnull], capture_output=True,
                           text=True, timeout=60)
    if probe.returncode != 0:
        raise OSError(f"{real} refuses {_FLAGS}: {probe.stderr.strip()[-200:]}")
    version = subprocess.run([real, "--version"], capture_output=True, text=True, timeout=60).stdout
    key = hashlib.sha256("\0".join((real, _FLAGS, version, cpu_identity())).encode()).hexdigest()[:16]
    home = cache_dir() / "cpu-jit" / key
    wrapper = home / "bin" / "g++"
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    script = f'#!/bin/sh\n# mlxd --cpu-jit auto: mlx\'s kernel compiler, for this CPU\nexec "{real}" {_FLAGS} "$@"\n'
    if not wrapper.is_file() or wrapper.read_text() != script:
        staged = wrapper.with_name(f".g++.{os.getpid()}")
        staged.write_text(script)
        staged.chmod(0o755)
        os.replace(staged, wrapper)  # atomic: a daemon starting beside this one runs all of it or the old one
    return home
