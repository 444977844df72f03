"""Exceptions of redis_ps: every server error keeps its code (ERR, STALE, WRONGTYPE, ...).

All of them derive from PSError (itself a redis.exceptions.ResponseError), so one
`except redis_ps.PSError` catches everything this package raises on purpose. The table in
python/README.md ("Errors") says when each is raised and what to do.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import redis.exceptions as rex

# Codes a redis-ps server answers with (module/errors.h) and Redis's own that matter here.
# redis-py strips the leading "ERR " and a few other codes into exception classes; the rest
# arrive with the code still in front of the message.
_KNOWN_CODES = ("ERR", "STALE", "WRONGTYPE", "BUSYKEY", "OOM", "NOPERM", "NOSCRIPT", "LOADING",
                "READONLY", "EXECABORT", "CROSSSLOT", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN",
                "NOAUTH", "WRONGPASS", "MOVED", "ASK", "BUSY", "NOREPLICAS", "MISCONF", "BACKLOG")
_CLASS_CODES = ((rex.NoPermissionError, "NOPERM"), (rex.ReadOnlyError, "READONLY"),
                (rex.BusyLoadingError, "LOADING"), (rex.ExecAbortError, "EXECABORT"),
                (rex.NoScriptError, "NOSCRIPT"))

MODULE_HINT = ("load the module: `MODULE LOAD /path/to/ps.so` (redis-cli), or start the "
               "server with `redis-server --loadmodule /path/to/ps.so` (make module builds "
               "build/ps.so; `make install` puts it in PREFIX/lib/redis-ps/ps.so)")


class PSError(rex.ResponseError):
    """An error reply of the server (or a bad request found by the client, code "ERR").
    'code' is the reply's first word ("ERR", "STALE", "WRONGTYPE", "BUSYKEY", "OOM", ...),
    'message' the rest; str() gives both, as the server wrote them. 'key' is the key the
    error is about when known."""

    def __init__(self, code: str, message: str, key: Optional[str] = None):
        self.code = code
        self.message = message
        self.key = key
        super().__init__("%s %s" % (code, message))


class StaleError(PSError):
    """A push refused as too stale (code STALE): nothing was applied."""


class ModuleNotLoaded(PSError):
    """The server answers but has no redis-ps module (PS.* are unknown commands)."""

    def __init__(self, where: str):
        super().__init__("ERR", "the server at %s has no redis-ps module (PS.* commands are "
                         "unknown): %s" % (where, MODULE_HINT))


class ServerUnavailable(PSError, rex.ConnectionError):
    """The server could not be reached (refused, reset, timed out) after the retries. Also a
    redis.exceptions.ConnectionError, so code catching redis-py's error still works."""

    def __init__(self, where: str, cause: BaseException, retries: int = 0):
        self.cause = cause
        msg = "cannot reach the server at %s (%s: %s)" % (where, type(cause).__name__, cause)
        if retries:
            msg += " after %d retries" % retries
        super().__init__("ERR", msg + ": is redis-server running and the address right?")


class SchemaError(PSError, ValueError):
    """The job on the server does not fit this client's model: a tensor's shape, its
    partitioning or its optimizer differ (e.g. the architecture changed under the same job
    name), or a gradient/value has the wrong size. 'tensor' names the tensor. Raised before
    anything is written. Also a ValueError."""

    def __init__(self, message: str, tensor: Optional[str] = None, key: Optional[str] = None):
        self.tensor = tensor
        super().__init__("ERR", message, key)


class WrongTypeError(PSError, TypeError):
    """A key the job needs holds another type (a string, a hash, a table where a tensor
    belongs, ...). Raised before anything is created or written."""

    def __init__(self, key: str, found: str, want: str, tensor: Optional[str] = None):
        self.tensor = tensor
        self.found = found
        super().__init__("WRONGTYPE", "key %s%s holds a %s, not a %s: the job name collides "
                         "with other data; use another job name or delete that key"
                         % (key, " (tensor %s)" % tensor if tensor else "", found, want), key)


class InvalidIds(PSError, ValueError):
    """Embedding ids or row indices that are not non-negative integers in range (a float, a
    negative id such as padding_idx -1, an id >= 2^64 or a row past the tensor's end).
    Nothing was sent. Also a ValueError."""

    def __init__(self, message: str):
        super().__init__("ERR", message)


class NonFiniteGradient(PSError, ArithmeticError):
    """A step's gradient holds NaN or Inf (e.g. an fp16 overflow): the whole step was
    refused before anything was sent (nothing applied, nothing queued, error-feedback
    residuals untouched). 'tensors' names the tensors with non-finite values."""

    def __init__(self, tensors: Sequence[str]):
        self.tensors: List[str] = list(tensors)
        super().__init__("ERR", "gradient contains NaN or Inf in %s; the whole step was "
                         "skipped (nothing sent)" % ", ".join(self.tensors))


class DurabilityError(PSError):
    """WAIT after a push answered fewer replicas than asked (durability policy "fail"): the
    push was applied on the master, but is not known to be replicated."""

    def __init__(self, message: str, key: Optional[str] = None):
        super().__init__("ERR", message, key)


def from_response(e: Exception, key: Optional[str] = None) -> PSError:
    """The PSError for redis-py's error 'e', with the code redis-py stripped put back. An
    unknown PS.* command becomes ModuleNotLoaded."""
    if isinstance(e, PSError):
        return e
    text = str(e).strip()
    code = None
    for cls, c in _CLASS_CODES:
        if isinstance(e, cls):
            code = c
    if code is None:
        first, _, rest = text.partition(" ")
        if first in _KNOWN_CODES:
            code, text = first, rest
        else:
            code = "ERR"
    if code == "ERR" and text.startswith("unknown command") and "'ps." in text.lower():
        return ModuleNotLoaded("this address")
    return (StaleError if code == "STALE" else PSError)(code, text, key)


__all__ = ["PSError", "StaleError", "ModuleNotLoaded", "ServerUnavailable", "SchemaError",
           "WrongTypeError", "InvalidIds", "NonFiniteGradient", "DurabilityError",
           "from_response", "MODULE_HINT"]
