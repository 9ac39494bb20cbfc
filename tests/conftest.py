"""Fixtures shared by every test tier.

The BLAS is chosen here, before anything imports mlx, as the daemon chooses it (``--cpu-blas auto``: an OpenBLAS
when there is one), so the in-process tiers run on it; ``MLXD_CPU_BLAS=system|packaged|bundled make test`` runs them
on another (the daemons e2e tests start choose for themselves: they get no ``MLXD_*`` variable).

Every daemon a test starts without ``--admin-listen`` takes the default admin socket, ``$XDG_RUNTIME_DIR/mlxd/
admin.sock`` (else ``/run/mlxd/admin.sock`` for root): the user's own daemon would then start without its admin
listener while a test holds it, and ``mlxd admin`` would talk to the test. So the test process, and every daemon
and client it starts (they inherit its environment), gets a private, short-lived XDG_RUNTIME_DIR.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from mlxd.engine.cpu import blas

BLAS_REPORT = blas.preload(os.environ.get("MLXD_CPU_BLAS", "auto"))  # type: ignore[arg-type]  # refused if unknown

# Short (a unix socket's path is at most 107 bytes) and private to this run.
PRIVATE_RUNTIME_DIR = tempfile.mkdtemp(prefix="mlxd-test-run-")
os.environ["XDG_RUNTIME_DIR"] = PRIVATE_RUNTIME_DIR

import fcntl  # noqa: E402
import hashlib  # noqa: E402
import importlib.metadata  # noqa: E402
import sys  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

import pytest  # noqa: E402

from mlxd.dev import synth

from mlxd.dev import synth_gemma4

from mlxd.dev import synth_llama

from mlxd.dev import synth_tokenizer

from mlxd.dev import synth_vlm  # noqa: E402

if TYPE_CHECKING:
    from mlxd.engine.loading.loader import LoadedModel

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_MODELS = REPO_ROOT / ".cache" / "test-models"


def _recipe_key(preset: str, seed: int) -> str:
    """A digest of everything the checkpoint's bytes depend on, so a stale cached copy is never reused."""
    digest = hashlib.sha256(f"{preset}:{seed}:{sys.version}".encode())
    for module in (synth, synth_tokenizer, synth_vlm, synth_gemma4, synth_llama):
        digest.update(Path(module.__file__ or "").read_bytes())
    digest.update(synth_llama.CORPUS.read_bytes())
    for dist in ("mlx", "mlx-lm", "tokenizers") + (("mlx-vlm",) if synth_vlm.is_preset(preset) else ()):
        digest.update(importlib.metadata.version(dist).encode())
    return digest.hexdigest()[:12]


def synthetic_checkpoint(preset: str = "tiny", seed: int = 0, passthrough: int = 0) -> Path:
    """The synthetic checkpoint for ``preset``/``seed`` (with ``passthrough`` do-nothing layers appended), made
    once and kept under .cache/test-models/.

    Safe from concurrent test processes (``make test`` runs pytest-xdist workers): the maker moves a finished
    checkpoint into place whole, and a lock file per checkpoint makes the other processes wait for it rather than
    make it again."""
    extra = f"-pass{passthrough}" if passthrough else ""
    out = TEST_MODELS / f"{preset}{extra}-seed{seed}-{_recipe_key(preset, seed)}"
    if (out / "config.json").exists():
        return out
    TEST_MODELS.mkdir(parents=True, exist_ok=True)
    with open(TEST_MODELS / f".{out.name}.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if not (out / "config.json").exists():
            try:
                synth.make_checkpoint(out, preset=preset, seed=seed, passthrough=passthrough)
            except FileExistsError:  # made by a process that does not take the lock (an older checkout's)
                if not (out / "config.json").exists():
                    raise
    return out


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(PRIVATE_RUNTIME_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_checkpoint() -> Path:
    """Path of the tiny synthetic checkpoint (float32, seed 0); treat it as read-only."""
    return synthetic_checkpoint("tiny")


@pytest.fixture(scope="session")
def tiny_llama_checkpoint() -> Path:
    """Path of the llama-vocabulary synthetic checkpoint (``tiny-llama``: BOS ``<s>`` = 1); treat it as read-only."""
    return synthetic_checkpoint("tiny-llama")


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint: Path) -> Iterator[LoadedModel]:
    """The tiny checkpoint loaded once per session; don't mutate it (load your own copy to add LoRA etc.)."""
    from mlxd.engine.loading.loader import load_model

    yield load_model(tiny_checkpoint)
