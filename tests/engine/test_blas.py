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
from tests.numerics import assert_close, assert_same_greedy

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


def _logit_reduction(checkpoint: Path, tokens: int) -> int:
    """The longest sum a logit goes through, per layer (the MLP's inner products, attention over the prompt and the
    residual stream), over the whole depth: the rounding bound is per term (tests/numerics.py)."""
    config = json.loads((checkpoint / "config.json").read_text())
    per_layer = config["intermediate_size"] + tokens + config["hidden_size"]
    return int(config["num_hidden_layers"]) * per_layer


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

    # Two BLAS libraries order their sums differently: the results agree within float32's rounding of the longest
    # sums involved, and greedy tokens agree wherever the top two logits are further apart than that.
    prompt = outputs["bundled"]["logits"].shape[0]
    for name, reduction in (("matmul", 1024), ("logits", _logit_reduction(tiny_checkpoint, prompt))):
        bundled, system = outputs["bundled"][name], outputs["system"][name]
        assert_close(system, bundled, reduction=reduction, what=name)
        assert_same_greedy(system, bundled, reduction=reduction)


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
