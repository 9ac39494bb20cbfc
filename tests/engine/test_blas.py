"""--cpu-blas: the system OpenBLAS is loaded ahead of mlx when present, and results do not change."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlxd.engine import blas
from mlxd.errors import EngineError

# Runs in a fresh interpreter: choose the BLAS, then compute a matmul and a forward pass of the tiny checkpoint.
_COMPUTE = textwrap.dedent(
    """
    import sys
    from mlxd.engine import blas
    report = blas.preload(sys.argv[1])
    import mlx.core as mx
    from mlxd.engine.loader import load_model
    a = mx.random.normal((512, 1024), key=mx.random.key(1))
    b = mx.random.normal((1024, 3072), key=mx.random.key(2))
    loaded = load_model(sys.argv[2])
    tokens = mx.array([loaded.tokenizer.encode("def fibonacci(n):\\n    return n")])
    mx.save_safetensors(sys.argv[3], {"matmul": a @ b, "logits": loaded.model(tokens)[0]})
    print(report.chosen)
    """
)


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_importing_the_engine_blas_module_leaves_mlx_unimported() -> None:
    result = _run("import json, sys, mlxd.engine.blas; "
                  "print(json.dumps([m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm')]))")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


@pytest.mark.skipif(
    blas.find_openblas() is None, reason="no system OpenBLAS on this machine (install libopenblas0-pthread)"
)
def test_system_blas_gives_the_same_results(tmp_path: Path, tiny_checkpoint: Path) -> None:
    import mlx.core as mx

    outputs = {}
    for mode in ("bundled", "system"):
        out = tmp_path / f"{mode}.safetensors"
        result = _run(_COMPUTE, mode, str(tiny_checkpoint), str(out))
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [mode]
        outputs[mode] = mx.load(str(out))

    for name in ("matmul", "logits"):
        bundled, system = outputs["bundled"][name], outputs["system"][name]
        assert mx.allclose(bundled, system, rtol=1e-5, atol=1e-4).item(), name
        assert mx.array_equal(mx.argmax(bundled, axis=-1), mx.argmax(system, axis=-1)).item(), name


def test_this_session_uses_the_system_blas_when_present() -> None:
    report = blas.preload("auto")

    assert report.chosen == ("system" if blas.find_openblas() else "bundled")
    assert report.describe().startswith("cpu-blas auto: ")
    with pytest.raises(EngineError, match="already chosen"):
        blas.preload("bundled")


def test_system_mode_refuses_once_mlx_is_imported() -> None:
    code = textwrap.dedent(
        """
        import mlx.core
        from mlxd.engine import blas
        from mlxd.errors import EngineError
        print(blas.preload("auto").chosen)
        blas._report = None
        try:
            blas.preload("system")
        except EngineError as exc:
            print(exc)
        """
    )
    result = _run(code)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "bundled",
        "cpu-blas system: mlx was imported before the BLAS could be chosen",
    ]


@pytest.mark.skipif(blas.find_openblas() is None, reason="no system OpenBLAS on this machine")
def test_threads_reach_openblas() -> None:
    code = "import os\nfrom mlxd.engine import blas\nr = blas.preload('system', threads=1)\n"
    code += "print(r.threads, os.environ['OPENBLAS_NUM_THREADS'], '1 threads): ' + r.reason in r.describe())"
    result = _run(code)

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "1", "True"]


@pytest.mark.skipif(blas.find_openblas() is None, reason="no system OpenBLAS on this machine")
@pytest.mark.parametrize(("preset", "in_force"), [(None, "20"), ("24", "24")])
def test_idle_openblas_threads_sleep_soon_unless_the_operator_says(preset: str | None, in_force: str) -> None:
    code = "import os\n"
    if preset is not None:
        code += f"os.environ['OPENBLAS_THREAD_TIMEOUT'] = '{preset}'\n"
    code += "from mlxd.engine import blas\nr = blas.preload('system')\n"
    code += "print(os.environ['OPENBLAS_THREAD_TIMEOUT'], r.thread_timeout, r.describe().split('; ')[-1])"
    result = _run(code)

    assert result.returncode == 0, result.stderr
    sleep = f"idle threads sleep after 2^{in_force} cycles"
    assert result.stdout.strip().split(maxsplit=2) == [in_force, in_force, sleep]


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(EngineError, match="unknown mode 'fast'"):
        blas.preload("fast")  # type: ignore[arg-type]


@pytest.mark.skipif(sys.platform != "linux", reason="the BLAS choice applies to mlx's Linux CPU backend only")
def test_without_a_system_openblas_the_log_says_what_to_install() -> None:
    """A fresh interpreter where no OpenBLAS is found: auto falls back to the bundled BLAS and its line names the
    package to install (issue 28, item 8)."""
    code = ("import sys; from mlxd.engine import blas; blas.find_openblas = lambda: None; "
            "blas._has_cuda_backend = lambda: False; print(blas.preload('auto').describe())")
    result = _run(code)
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("cpu-blas auto: bundled: no system OpenBLAS found"), line
    assert "install libopenblas0-pthread" in line and "slower" in line
