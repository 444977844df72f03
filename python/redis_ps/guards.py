"""Guards of what a caller hands over: ids checked before they reach a server (check_ids),
and a block that a Ctrl-C cannot cut in half (deferred_interrupts)."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Optional, Tuple

import numpy as np

from .errors import InvalidIds


class deferred_interrupts:
    """Context manager: a SIGINT (Ctrl-C) that arrives inside the block is held back and
    delivered (KeyboardInterrupt, or the program's own handler) when the block ends, so the
    block runs whole. A second SIGINT more than a second after the first is delivered at
    once (a hung server must not make Ctrl-C useless). Only in the main thread (the only
    one Python delivers signals to) and only over a Python-level handler."""

    def __init__(self) -> None:
        self.old: Any = None
        self.got: Optional[Tuple[int, Any]] = None
        self.first = 0.0

    def _hold(self, sig: int, frame: Any) -> None:
        if self.got is not None and time.monotonic() - self.first > 1.0:
            signal.signal(signal.SIGINT, self.old)
            self.old = None
            raise KeyboardInterrupt
        if self.got is None:
            self.got, self.first = (sig, frame), time.monotonic()

    def __enter__(self) -> "deferred_interrupts":
        if threading.current_thread() is threading.main_thread():
            try:
                old = signal.getsignal(signal.SIGINT)
                if callable(old):
                    signal.signal(signal.SIGINT, self._hold)
                    self.old = old
            except (ValueError, TypeError):
                self.old = None
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self.old is not None:
            old, self.old = self.old, None
            signal.signal(signal.SIGINT, old)
            if self.got is not None:
                old(*self.got)
        return False


def check_ids(ids: Any, what: str = "ids", limit: Optional[int] = None) -> np.ndarray:
    """'ids' (a sequence, numpy array or anything np.asarray takes; torch tensors via numpy)
    as a flat uint64 array, refusing with InvalidIds anything that is not a non-negative
    integer below 'limit' (2^64 when None): floats (even 3.0: a float id is a bug upstream),
    booleans, negative values (padding_idx -1: drop those rows first) and ids too large."""
    if isinstance(ids, (list, tuple)):
        # numpy would turn [0, 2**64 - 1] or [1, 2.5] into float64: check the items
        a = np.empty(len(ids), dtype=object)
        a[:] = list(ids)
    elif isinstance(ids, (int, np.integer, float, np.floating)):
        a = np.empty(1, dtype=object)
        a[0] = ids
    else:
        a = np.asarray(ids)
    if a.dtype == object:
        vals = a.reshape(-1).tolist()
        for v in vals:
            if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)):
                raise InvalidIds("%s must be integers; got %r (%s)"
                                 % (what, v, type(v).__name__))
            if v < 0 or v >= (limit if limit is not None else 1 << 64):
                raise InvalidIds("%s must be in [0, %d); got %d%s"
                                 % (what, limit if limit is not None else 1 << 64, v,
                                    " (padding_idx -1? drop those rows before pushing)"
                                    if v < 0 else ""))
        return np.array(vals, dtype=np.uint64) if vals else np.zeros(0, np.uint64)
    a = a.reshape(-1)
    if a.dtype.kind not in "iu":
        raise InvalidIds("%s must be integers; got an array of %s%s"
                         % (what, a.dtype, " (e.g. %r)" % a[0].item() if a.size else ""))
    if a.size and a.dtype.kind == "i":
        lo = int(a.min())
        if lo < 0:
            raise InvalidIds("%s must be >= 0; got %d (padding_idx -1? drop those rows "
                             "before pushing or pulling)" % (what, lo))
    if a.size and limit is not None:
        hi = int(a.max())
        if hi >= limit:
            raise InvalidIds("%s must be < %d; got %d" % (what, limit, hi))
    return a.astype(np.uint64)
