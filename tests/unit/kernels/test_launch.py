"""kernel_launch: big launches queue behind each other; small ones skip the queue on a thread-safe layer."""

from __future__ import annotations

import threading

import numba
import numpy as np
from numba import prange

from memevo.kernels import _wrappers
from memevo.kernels.params import CHUNK


@numba.njit(parallel=True, cache=False)
def _total(x: np.ndarray) -> float:  # pragma: no cover - compiled
    s = 0.0
    for i in prange(x.size):
        s += x[i]
    return s


def test_a_small_launch_waits_for_a_running_big_one_only_on_an_unsafe_layer() -> None:
    with _wrappers.kernel_launch(CHUNK * 4):
        assert _total(np.ones(CHUNK * 4)) == CHUNK * 4
    threadsafe = numba.threading_layer() in ("omp", "tbb")
    assert _wrappers._threadsafe is threadsafe

    finished = threading.Event()

    def small_launch() -> None:
        with _wrappers.kernel_launch(10):
            _total(np.ones(10))
        finished.set()

    with _wrappers._LAUNCH_LOCK:  # a big launch is running
        worker = threading.Thread(target=small_launch)
        worker.start()
        # On OpenMP/TBB the small launch does not queue; on workqueue it must (concurrent launches abort).
        assert finished.wait(timeout=30 if threadsafe else 0.5) is threadsafe
    worker.join(timeout=30)
    assert finished.is_set()
    assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS  # the one-thread setting was undone
