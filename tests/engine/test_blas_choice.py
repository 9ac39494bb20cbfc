"""Which OpenBLAS ``--cpu-blas auto`` takes (the packaged one unless the system's is newer), how a library's version
is read, and the warning for generic kernels on a CPU with AVX2 or AVX-512."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from mlxd.engine.cpu import blas

from mlxd.engine.cpu import blas_libs
from mlxd.engine.cpu.blas_kernel import Kernel, cpu_flags, generic_warning, identify
from mlxd.engine.cpu.blas_libs import Library, choose, version_of
from mlxd.errors import EngineError


def system(version: tuple[int, ...] | None) -> Library:
    return Library("system", "/usr/lib/libopenblas.so.0", version)


def packaged(version: tuple[int, ...] | None) -> Library:
    return Library("packaged", "/site-packages/ngsolve_openblas/libopenblasp-r0.3.33.so", version)


@pytest.mark.parametrize(
    ("system_version", "packaged_version", "chosen"),
    [
        ((0, 3, 21), (0, 3, 33), "packaged"),  # Debian 12's, which does not know Sapphire Rapids
        ((0, 3, 34), (0, 3, 33), "system"),  # a newer distribution knows at least the CPUs the wheel knows
        ((0, 3, 33), (0, 3, 33), "packaged"),  # as new: the one mlxd ships and was tested with
        ((0, 3, 9), (0, 3, 33), "packaged"),
        ((0, 4, 0), (0, 3, 33), "system"),
        (None, (0, 3, 33), "packaged"),  # a system library of unknown version is not shown to be newer
        ((0, 3, 40), None, "packaged"),
    ],
)
def test_auto_takes_the_packaged_openblas_unless_the_systems_is_newer(
    system_version: tuple[int, ...] | None, packaged_version: tuple[int, ...] | None, chosen: str
) -> None:
    library, reason = choose(system(system_version), packaged(packaged_version))

    assert library is not None and library.source == chosen
    assert chosen in reason


def test_auto_takes_whichever_one_is_there() -> None:
    assert choose(system((0, 3, 21)), None)[0] == system((0, 3, 21))
    assert choose(None, packaged((0, 3, 33)))[0] == packaged((0, 3, 33))
    library, reason = choose(None, None)
    assert library is None and "no OpenBLAS found" in reason


def test_version_from_the_file_name_through_a_link(tmp_path: Path) -> None:
    real = tmp_path / "libopenblasp-r0.3.21.so"
    real.write_bytes(b"\x7fELF")
    link = tmp_path / "libopenblas.so.0"
    link.symlink_to(real)

    assert version_of(str(link)) == (0, 3, 21)


def test_version_from_the_config_string_when_the_name_has_none(tmp_path: Path) -> None:
    library = tmp_path / "libopenblas.so.0"
    library.write_bytes(b"\x00" * 4096 + b"OpenBLAS 0.3.26 DYNAMIC_ARCH NO_AFFINITY\x00" + b"\x00" * 64)
    nameless = tmp_path / "libblas.so.3"
    nameless.write_bytes(b"\x00" * 64)

    assert version_of(str(library)) == (0, 3, 26)
    assert version_of(str(nameless)) is None
    assert version_of(str(tmp_path / "absent.so")) is None


def test_packaged_mode_is_refused_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blas, "find_packaged", lambda: None)
    monkeypatch.setattr(blas, "_has_cuda_backend", lambda: False)
    monkeypatch.setattr(blas.sys, "platform", "linux")

    with pytest.raises(EngineError, match="cpu-blas packaged: the ngsolve-openblas package is not installed"):
        blas.check("packaged")
    blas.check("auto")  # auto falls back to what there is


AVX512 = frozenset({"sse3", "avx", "avx2", "avx512f", "avx512bw"})
AVX2 = frozenset({"sse3", "avx", "avx2", "fma"})


def test_generic_kernels_on_an_avx512_cpu_warn_and_say_what_to_do() -> None:
    warning = generic_warning(Kernel("0.3.21", "Prescott", None), AVX512, "x86_64")

    assert warning is not None
    assert "OpenBLAS 0.3.21, Prescott kernels on a CPU with AVX-512" in warning
    assert "OPENBLAS_CORETYPE=SkylakeX" in warning and "newer OpenBLAS" in warning
    assert "pip install ngsolve-openblas" in warning


def test_generic_kernels_on_an_avx2_cpu_suggest_haswell() -> None:
    warning = generic_warning(Kernel("0.3.21", "Sandybridge", None), AVX2, "x86_64")

    assert warning is not None and "with AVX2" in warning and "OPENBLAS_CORETYPE=Haswell" in warning


@pytest.mark.parametrize(
    ("corename", "flags", "machine"),
    [
        ("SkylakeX", AVX512, "x86_64"),
        ("Cooperlake", AVX512, "x86_64"),
        ("SapphireRapids", AVX512, "x86_64"),
        ("Haswell", AVX2, "x86_64"),
        ("Zen", AVX2, "x86_64"),
        ("Prescott", frozenset({"sse3"}), "x86_64"),  # generic is what this CPU can run
        ("NEOVERSEN1", frozenset({"asimd"}), "aarch64"),
        (None, AVX512, "x86_64"),  # not an OpenBLAS: nothing to judge
    ],
)
def test_no_warning_where_the_kernels_fit_the_cpu(corename: str | None, flags: frozenset[str], machine: str) -> None:
    assert generic_warning(Kernel("0.3.33", corename, None), flags, machine) is None


def test_cpu_flags_come_from_the_first_cpu() -> None:
    text = "processor\t: 0\nflags\t\t: fpu sse3 avx2 avx512f\n\nprocessor\t: 1\nflags\t\t: fpu\n"

    assert cpu_flags(text) == frozenset({"fpu", "sse3", "avx2", "avx512f"})
    assert cpu_flags("processor\t: 0\n") == frozenset()


@pytest.mark.skipif(blas_libs.find_packaged() is None, reason="ngsolve-openblas is not installed (Linux x86_64 only)")
def test_the_packaged_library_names_its_version_and_kernels() -> None:
    path = blas_libs.find_packaged()
    assert path is not None
    kernel = identify(ctypes.CDLL(path))  # the suite's session has loaded it already (tests/conftest.py)

    assert kernel.version is not None and blas_libs.parse_version(kernel.version) == version_of(path)
    assert kernel.corename and kernel.config and kernel.config.startswith(f"OpenBLAS {kernel.version} ")
    assert "DYNAMIC_ARCH" in kernel.config  # kernels chosen for the CPU it runs on, not the one it was built on
