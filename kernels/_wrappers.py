"""What the public kernel wrappers share: argument checks (ValueError saying what to pass instead) and launching."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numba
import numpy as np
import numpy.typing as npt
from numba.np.ufunc.parallel import threading_layer as _untyped_threading_layer

from memevo.kernels.params import CHUNK, N_PARAMS, validate_params

_LAUNCH_LOCK = threading.Lock()
_THREADSAFE_LAYERS = frozenset({"omp", "tbb"})
_threading_layer: Callable[[], str] = _untyped_threading_layer  # numba ships no annotations
_threadsafe = False
"""True once a launch showed that numba runs on a thread-safe layer (OpenMP or TBB)."""


@contextlib.contextmanager
def kernel_launch(n: int) -> Iterator[None]:
    """Run the parallel kernel called inside this block on ``n`` items: big launches one at a time, small ones alone.

    Big launches one at a time: each already uses every core, so queueing costs nothing, and numba's fallback
    "workqueue" threading layer aborts the process on concurrent launches (gRPC threads and the governance
    daemon may call kernels at once). Waiting releases the GIL. A single chunk runs on one thread: it has no
    parallel work anyway, and waking the other threads costs up to tens of ms when the cores are busy
    (p99 48 ms against 6 ms for a 20-item call on this machine under load). On a thread-safe layer a small
    launch skips the queue, so a recall scoring its candidates never waits behind a 10-million-item sweep.
    """
    global _threadsafe
    if n <= CHUNK and _threadsafe:
        with _one_thread():
            yield
        return
    with _LAUNCH_LOCK:
        if n > CHUNK:
            yield
        else:
            with _one_thread():
                yield
        if not _threadsafe:
            with contextlib.suppress(ValueError):  # no parallel kernel has run yet
                _threadsafe = _threading_layer() in _THREADSAFE_LAYERS


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    previous = numba.get_num_threads()
    numba.set_num_threads(1)  # thread-local in numba: other threads keep their setting
    try:
        yield
    finally:
        numba.set_num_threads(previous)


def check_column(name: str, array: object, dtype: type[np.generic], length: int | None) -> int:
    """The length of ``array`` once it is a 1-D C-contiguous array of ``dtype`` (and ``length``, if given)."""
    # The common case first and with no string work: recall checks a dozen columns per call.
    if (
        isinstance(array, np.ndarray)
        and array.ndim == 1
        and array.dtype == dtype
        and array.flags.c_contiguous
        and (length is None or array.shape[0] == length)
    ):
        return int(array.shape[0])
    want = np.dtype(dtype).name
    fix = f"pass np.ascontiguousarray({name}, dtype=np.{want})"
    if not isinstance(array, np.ndarray):
        raise ValueError(f"{name} must be a numpy array of {want}, not {type(array).__name__}: {fix}")
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one entry per slot), not of shape {array.shape}")
    if array.dtype != dtype:
        raise ValueError(f"{name} must be {want}, not {array.dtype}: {fix}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (a strided view was given): {fix}")
    raise ValueError(f"{name} has {array.shape[0]} entries but the first column has {length}: pass equal lengths")


def check_output(name: str, array: object, dtype: type[np.generic], length: int) -> None:
    """Check an ``out`` array: like a column, and writable."""
    check_column(name, array, dtype, length)
    assert isinstance(array, np.ndarray)
    if not array.flags.writeable:
        raise ValueError(f"{name} is read-only: pass a writable array (or no out)")


def check_scalar(name: str, value: object, *, positive: bool) -> float:
    """``value`` as a float once it is a finite real number (and > 0 when ``positive``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a finite number, not {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, not {result}")
    if positive and result <= 0:
        raise ValueError(f"{name} must be > 0, not {result}")
    return result


def check_params(params: object) -> npt.NDArray[np.float64]:
    """``params`` once it is a valid C-contiguous policy matrix (see ``validate_params``).

    A matrix already checked with the same contents passes at once: sidecars pass the same few policies
    on every read.
    """
    if isinstance(params, np.ndarray) and params.dtype == np.float64 and params.flags.c_contiguous:
        key = (params.shape, params.tobytes())
        if key in _VALID_PARAMS:
            return params
    problems = validate_params(params)
    if problems:
        raise ValueError("invalid params (start from default_params()): " + "; ".join(problems))
    assert isinstance(params, np.ndarray)
    if not params.flags.c_contiguous:
        raise ValueError(f"params must be C-contiguous: pass np.ascontiguousarray(params) of shape (n, {N_PARAMS})")
    with _VALID_LOCK:
        if len(_VALID_PARAMS) >= _VALID_PARAMS_MAX:
            _VALID_PARAMS.clear()
        _VALID_PARAMS.add((params.shape, params.tobytes()))
    return params


_VALID_PARAMS: set[tuple[tuple[int, ...], bytes]] = set()
_VALID_PARAMS_MAX = 64
_VALID_LOCK = threading.Lock()


def renamed(function: Any, name: str) -> Any:
    """A copy of ``function`` called ``name``, to compile with other options than the original.

    Numba caches compiled code by function name and line, not by compile options: a serial build
    of ``_compute_scores`` under the same name would load the parallel build from the cache.
    """
    code = function.__code__.replace(co_name=name, co_qualname=name)
    copy = type(function)(code, function.__globals__, name, function.__defaults__, function.__closure__)
    copy.__qualname__ = name
    return copy
