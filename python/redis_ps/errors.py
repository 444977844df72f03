"""Exceptions of redis_ps: every server error keeps its code (ERR, STALE, WRONGTYPE, ...)."""

from __future__ import annotations

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


class PSError(rex.ResponseError):
    """An error reply of the server (or a bad request found by the client, code "ERR").
    'code' is the reply's first word ("ERR", "STALE", "WRONGTYPE", "BUSYKEY", "OOM", ...),
    'message' the rest; str() gives both, as the server wrote them."""

    def __init__(self, code: str, message: str, key: str | None = None):
        self.code = code
        self.message = message
        self.key = key
        super().__init__("%s %s" % (code, message))


class StaleError(PSError):
    """A push refused as too stale (code STALE): nothing was applied."""


def from_response(e: Exception, key: str | None = None) -> PSError:
    """The PSError for redis-py's error 'e', with the code redis-py stripped put back."""
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
    return (StaleError if code == "STALE" else PSError)(code, text, key)
