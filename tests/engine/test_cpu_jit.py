"""--cpu-jit: mlx's fused CPU kernels built for this CPU, in a directory of mlxd's cache, with the same results."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mlxd.engine.cpu import jit
from mlxd.errors import EngineError

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None or not sys.platform.startswith("linux"),
                               reason="mlx builds its CPU kernels with g++, on Linux")


def test_off_leaves_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("TMPDIR", raising=False)

    report = jit.prepare("off")

    assert report.directory is None and report.note.startswith("cpu-jit off")
    assert os.environ["PATH"] == "/usr/bin:/bin" and "TMPDIR" not in os.environ


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(EngineError, match="cpu-jit: unknown mode 'fast'"):
        jit.prepare("fast")  # type: ignore[arg-type]


@needs_gxx
def test_a_compiler_that_refuses_the_flag_leaves_mlx_as_it_is(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "g++"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -march=native ] && { echo "no such flag" >&2; exit 1; }; '
                    'done\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = os.environ["PATH"]

    report = jit.prepare("auto", compiler=str(fake))

    assert report.directory is None and "refuses -march=native" in report.note and "no such flag" in report.note
    assert os.environ["PATH"] == path and not (tmp_path / "cache").exists()


_BUILD = textwrap.dedent(
    """
    import os, sys
    from mlxd.engine.cpu import jit
    report = jit.prepare("auto")
    import mlx.core as mx

    @mx.compile
    def swiglu(gate, up):
        return gate * mx.sigmoid(gate) * up

    gate = mx.random.normal((4096,), key=mx.random.key(1))
    up = mx.random.normal((4096,), key=mx.random.key(2))
    fused = swiglu(gate, up)
    plain = gate * mx.sigmoid(gate) * up
    print(report.directory)
    print(os.environ["TMPDIR"])
    print(mx.abs(fused - plain).max().item(), mx.abs(plain).max().item())
    """
)


@needs_gxx
def test_mlx_builds_its_kernels_with_the_flag_in_mlxd_s_directory(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), TMPDIR=str(tmp_path / "elsewhere"))

    result = subprocess.run([sys.executable, "-c", _BUILD], capture_output=True, text=True, timeout=300, env=env)

    assert result.returncode == 0, result.stderr
    directory, tmpdir, errors = result.stdout.splitlines()
    home = Path(directory)
    assert home.parent == tmp_path / "cache" / "mlxd" / "cpu-jit" and tmpdir == str(home / "tmp")
    wrapper = (home / "bin" / "g++").read_text()
    assert "-march=native" in wrapper and shutil.which("g++") in wrapper
    built = list((home / "tmp").glob("mlx/*/cpu/*.so"))
    assert built, "mlx built no kernel in mlxd's directory"
    assert not (tmp_path / "elsewhere").exists()
    # One fused kernel against the same operations one at a time: a few float32 roundings of values below ~10.
    difference, scale = map(float, errors.split())
    assert difference <= 8 * 2.0**-23 * max(scale, 1.0)


_BITS = textwrap.dedent(
    """
    import sys
    from mlxd.engine.cpu import jit
    jit.prepare(sys.argv[1])
    import mlx.core as mx
    import numpy as np

    @mx.compile
    def kernels(gate, up, scores):
        return gate * mx.sigmoid(gate) * up, mx.exp(scores - mx.max(scores, axis=-1, keepdims=True))

    gate = 12 * mx.random.normal((8, 4099), key=mx.random.key(1))  # not a multiple of any vector width
    up = mx.random.normal((8, 4099), key=mx.random.key(2))
    scores = 30 * mx.random.normal((8, 4099), key=mx.random.key(3))
    swiglu, softmax = kernels(gate, up, scores)
    np.savez(sys.argv[2], swiglu=np.array(swiglu), softmax=np.array(softmax))
    """
)


@needs_gxx
def test_the_kernels_built_for_this_cpu_compute_mlx_s_bits(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), TMPDIR=str(tmp_path / "generic"))
    (tmp_path / "generic").mkdir()
    for mode in ("off", "auto"):
        result = subprocess.run([sys.executable, "-c", _BITS, mode, str(tmp_path / f"{mode}.npz")],
                                capture_output=True, text=True, timeout=300, env=env)
        assert result.returncode == 0, result.stderr
    assert list((tmp_path / "generic").glob("mlx/*/cpu/*.so")), "mlx built no generic kernel"

    generic, native = np.load(tmp_path / "off.npz"), np.load(tmp_path / "auto.npz")

    for name in ("swiglu", "softmax"):  # the flags neither reorder nor contract arithmetic: the same bits
        assert np.array_equal(generic[name].view(np.uint32), native[name].view(np.uint32)), name
