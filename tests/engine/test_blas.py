"""--cpu-blas: the system OpenBLAS is loaded ahead of mlx when present, and results do not change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from mlxd.engine.cpu import blas

from mlxd.engine.cpu import blas_libs
from mlxd.engine.cpu.blas_kernel import read_cpu_flags
from mlxd.errors import EngineError
from tests.conftest import BLAS_REPORT
from tests.numerics import assert_close, assert_same_greedy

# Runs in a fresh interpreter: choose the BLAS, then compute a matmul, a forward pass of the tiny checkpoint and its
# greedy continuation (mlx-lm's own generation loop).
_COMPUTE = textwrap.dedent(
    """
    import sys
    from mlxd.engine.cpu import blas
    report = blas.preload(sys.argv[1])
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlxd.engine.loading.loader import load_model
    a = mx.random.normal((512, 1024), key=mx.random.key(1))
    b = mx.random.normal((1024, 3072), key=mx.random.key(2))
    loaded = load_model(sys.argv[2])
    prompt = loaded.tokenizer.encode("def fibonacci(n):\\n    return n")
    greedy = [int(t) for t, _ in generate_step(mx.array(prompt), loaded.model, max_tokens=GREEDY_TOKENS)]
    mx.save_safetensors(sys.argv[3], {"matmul": a @ b, "logits": loaded.model(mx.array([prompt]))[0],
                                      "greedy": mx.array(greedy)})
    print(report.chosen)
    """
).replace("GREEDY_TOKENS", "32")


def _logit_reduction(checkpoint: Path, tokens: int) -> int:
    """The longest sum a logit goes through, per layer (the MLP's inner products, attention over the prompt and the
    residual stream), over the whole depth: the rounding bound is per term (tests/numerics.py)."""
    config = json.loads((checkpoint / "config.json").read_text())
    per_layer = config["intermediate_size"] + tokens + config["hidden_size"]
    return int(config["num_hidden_layers"]) * per_layer


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_importing_the_engine_blas_module_leaves_mlx_unimported() -> None:
    result = _run("import json, sys, mlxd.engine.cpu.blas; "
                  "print(json.dumps([m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm')]))")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def _compute(mode: str, checkpoint: Path, out: Path) -> dict[str, Any]:
    import mlx.core as mx

    result = _run(_COMPUTE, mode, str(checkpoint), str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [mode]
    return dict(mx.load(str(out)))


@pytest.fixture(scope="module")
def bundled_outputs(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _compute("bundled", tiny_checkpoint, tmp_path_factory.mktemp("blas") / "bundled.safetensors")


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("system", marks=pytest.mark.skipif(
            blas.find_openblas() is None, reason="no system OpenBLAS on this machine (install libopenblas0-pthread)")),
        pytest.param("packaged", marks=pytest.mark.skipif(
            blas.find_packaged() is None, reason="ngsolve-openblas is not installed (Linux x86_64 only)")),
    ],
)
def test_openblas_gives_the_bundled_blas_results(
    mode: str, tmp_path: Path, tiny_checkpoint: Path, bundled_outputs: dict[str, Any]
) -> None:
    outputs = _compute(mode, tiny_checkpoint, tmp_path / f"{mode}.safetensors")

    # Two BLAS libraries order their sums differently: the results agree within float32's rounding of the longest
    # sums involved, and greedy tokens agree wherever the top two logits are further apart than that.
    prompt = bundled_outputs["logits"].shape[0]
    for name, reduction in (("matmul", 1024), ("logits", _logit_reduction(tiny_checkpoint, prompt))):
        bundled, openblas = bundled_outputs[name], outputs[name]
        assert_close(openblas, bundled, reduction=reduction, what=name)
        assert_same_greedy(openblas, bundled, reduction=reduction)
    # And the tiny fixture's greedy continuation is the same token for token.
    assert outputs["greedy"].tolist() == bundled_outputs["greedy"].tolist()


@pytest.mark.skipif(BLAS_REPORT.mode != "auto", reason=f"this session asked for {BLAS_REPORT.mode} (MLXD_CPU_BLAS)")
def test_this_session_uses_the_packaged_openblas_unless_the_system_has_a_newer_one() -> None:
    report = blas.preload("auto")
    library, _ = blas_libs.choose(blas_libs.system_library(), blas_libs.packaged_library())

    assert report.chosen == (library.source if library else "bundled")
    assert report.describe().startswith("cpu-blas auto: ")
    if library is not None:  # the log and /props name the library's version and its kernels
        assert report.kernel is not None and report.kernel.version and report.kernel.corename
        assert f"OpenBLAS {report.kernel.version}, {report.kernel.corename} kernels" in report.describe()
        assert report.summary().startswith(f"{library.source}, OpenBLAS {report.kernel.version}, "
                                           f"{report.kernel.corename} kernels")
    with pytest.raises(EngineError, match="already chosen"):
        blas.preload("bundled")


def test_system_mode_refuses_once_mlx_is_imported() -> None:
    code = textwrap.dedent(
        """
        import mlx.core
        from mlxd.engine.cpu import blas
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
    code = "import os\nfrom mlxd.engine.cpu import blas\nr = blas.preload('system', threads=1)\n"
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
    code += "from mlxd.engine.cpu import blas\nr = blas.preload('system')\n"
    code += "print(os.environ['OPENBLAS_THREAD_TIMEOUT'], r.thread_timeout, "
    code += "[p for p in r.describe().split('; ') if p.startswith('idle threads')][0])"
    result = _run(code)

    assert result.returncode == 0, result.stderr
    sleep = f"idle threads sleep after 2^{in_force} cycles"
    assert result.stdout.strip().split(maxsplit=2) == [in_force, in_force, sleep]


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(EngineError, match="unknown mode 'fast'"):
        blas.preload("fast")  # type: ignore[arg-type]


@pytest.mark.skipif(blas.find_packaged() is None, reason="ngsolve-openblas is not installed (Linux x86_64 only)")
@pytest.mark.skipif("avx2" not in read_cpu_flags(), reason="generic kernels are what this CPU can run")
def test_generic_kernels_on_a_wide_cpu_are_a_logged_warning() -> None:
    """OPENBLAS_CORETYPE forces the generic kernels an OpenBLAS too old for the CPU falls back to."""
    code = "import logging\nlogging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s')\n"
    code += "from mlxd.engine.cpu import blas\nr = blas.preload('packaged')\nprint(r.kernel.corename)\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "OPENBLAS_CORETYPE": "Prescott"})

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["Prescott"]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING ")]
    assert len(warnings) == 1 and "Prescott kernels on a CPU with AVX" in warnings[0], result.stderr
    assert "OPENBLAS_CORETYPE=" in warnings[0]


@pytest.mark.skipif(sys.platform != "linux", reason="the BLAS choice applies to mlx's Linux CPU backend only")
def test_without_a_system_openblas_the_log_says_what_to_install() -> None:
    """A fresh interpreter where no OpenBLAS is found (neither the packaged one nor the system's): auto falls back to
    the bundled BLAS and its line says what to install."""
    code = ("import sys; from mlxd.engine.cpu import blas; blas.system_library = lambda: None; "
            "blas.packaged_library = lambda: None; blas._has_cuda_backend = lambda: False; "
            "print(blas.preload('auto').describe())")
    result = _run(code)
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("cpu-blas auto: bundled: no OpenBLAS found"), line
    assert "install libopenblas0-pthread" in line and "slower" in line
