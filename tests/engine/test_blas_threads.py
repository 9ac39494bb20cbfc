"""OpenBLAS's thread count by the work of a pass (engine.cpu.blas_threads): one thread for a decode step of a few
rows, OpenBLAS's own count for every other pass, and only when the operator left --threads unset."""

from __future__ import annotations

from typing import Any

import pytest

from mlxd.engine.cpu import blas_threads
from mlxd.engine.cpu.blas_threads import FEW_ROWS, WorkThreads
from tests.conftest import BLAS_REPORT


class _Function:
    def __init__(self, result: int = 0) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.result = result

    def __call__(self, *args: Any) -> int:
        self.calls.append(args)
        return self.result


class _OpenBlas:
    """What WorkThreads calls of a loaded OpenBLAS, recorded."""

    def __init__(self, threads: int) -> None:
        self.openblas_set_num_threads = _Function()
        self.openblas_get_num_threads = _Function(threads)


@pytest.mark.parametrize(("rows", "threads"), [(1, 1), (FEW_ROWS, 1), (FEW_ROWS + 1, 4), (512, 4)])
def test_a_pass_of_few_rows_gets_one_thread_and_others_all(rows: int, threads: int) -> None:
    assert WorkThreads(_OpenBlas(4), 4).threads_for(rows) == threads  # type: ignore[arg-type]


def test_the_count_is_set_only_when_it_changes() -> None:
    library = _OpenBlas(2)
    work = WorkThreads(library, 2)  # type: ignore[arg-type]

    for rows in (512, 1, 1, 4, 300, 2048, 1):
        work.for_rows(rows)

    assert library.openblas_set_num_threads.calls == [(1,), (2,), (1,)]
    assert work.current == 1


def test_a_single_threaded_openblas_is_left_alone() -> None:
    assert blas_threads.enable(_OpenBlas(1)) is None  # type: ignore[arg-type]


@pytest.mark.skipif(BLAS_REPORT.library is None, reason="no OpenBLAS in this session")
def test_this_session_says_whether_it_chooses_by_the_work() -> None:
    active = blas_threads.active()
    if BLAS_REPORT.threads is not None or active is None:  # --threads given, or OpenBLAS has one thread
        assert BLAS_REPORT.by_work is None and "threads by the work" not in BLAS_REPORT.describe()
    else:
        assert BLAS_REPORT.by_work == active.full > 1
        assert f"1 for a decode step of up to {FEW_ROWS} rows, {active.full} for other passes" \
            in BLAS_REPORT.describe()
