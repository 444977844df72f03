"""Small helpers shared by the redis-ps test files: float32 blobs, pull/info parsing."""

import re

import numpy as np

import psserver

ERROR_CODE_RE = re.compile(r"^[A-Z][A-Z0-9_]*( |$)")


def f32(a):
    """numpy array -> little-endian float32 bytes."""
    return np.ascontiguousarray(np.asarray(a, dtype="<f4")).tobytes()


def from_f32(b, shape=None):
    a = np.frombuffer(b, dtype="<f4").copy()
    return a.reshape(shape) if shape is not None else a


def create(r, key, shape, *opts):
    """PS.CREATE key SHAPE *shape *opts; returns the reply."""
    return r.execute_command("PS.CREATE", key, "SHAPE", *[int(d) for d in shape], *opts)


def create_data(r, key, arr, *opts):
    """Create 'key' with the values of numpy array 'arr' (float32) via DATA."""
    arr = np.asarray(arr, dtype=np.float32)
    return create(r, key, arr.shape, "DATA", f32(arr), *opts)


def pull(r, key, *opts):
    """PS.PULL key *opts -> (version, data)."""
    rep = r.execute_command("PS.PULL", key, *opts)
    assert isinstance(rep, list) and len(rep) == 2, "PS.PULL reply %r" % (rep,)
    return rep[0], rep[1]


def pull_np(r, key):
    """(version, float32 numpy array of the flat values) via FORMAT F32."""
    v, data = pull(r, key, "FORMAT", "F32")
    return v, from_f32(data)


def push(r, key, grad, *opts):
    return r.execute_command("PS.PUSHGRAD", key, f32(grad), *opts)


def info(r, key):
    """PS.INFO key -> dict with str field names (values as returned)."""
    rep = r.execute_command("PS.INFO", key)
    assert isinstance(rep, list) and len(rep) % 2 == 0, "PS.INFO reply %r" % (rep,)
    out = {}
    for k, v in zip(rep[0::2], rep[1::2]):
        out[k.decode() if isinstance(k, bytes) else k] = v
    return out


def num(v):
    """A number from a reply element (int, or a double sent as bulk string)."""
    if isinstance(v, bytes):
        v = v.decode()
    return float(v)


def is_error_with_code(rep):
    return isinstance(rep, psserver.RespError) and ERROR_CODE_RE.match(str(rep)) is not None


digest = psserver.digest
