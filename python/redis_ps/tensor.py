"""Tensor: one PS tensor key, its methods one-to-one onto the PS.* commands, and the
PS.CREATE / PS.PUSHGRAD argument lists that Model and the torch optimizer share."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import codec
from .conn import ArrayLike, Client, _call, _info_dict, _num, _s

_HYPER = ("lr", "momentum", "beta1", "beta2", "eps", "wd", "clipnorm", "maxstaleness",
          "policy", "sync", "timeout", "dedupmax", "maxsnapshots")


def _create_args(key: str, shape: Sequence[int], init: Any = None, data: Any = None,
                 fmt: str = "F32", seed: Optional[int] = None, optim: Optional[str] = None,
                 nx: bool = False, **hyper: Any) -> List[Any]:
    """The PS.CREATE argument list (see docs/commands.md)."""
    args: List[Any] = ["PS.CREATE", key, "SHAPE"] + [int(d) for d in shape]
    if init is not None:
        parts = [init] if isinstance(init, str) else list(init)
        args += ["INIT", str(parts[0]).upper()] + [_num(p) for p in parts[1:]]
    if data is not None:
        args += ["DATA", data if isinstance(data, bytes) else codec.encode(fmt, data)]
        if codec.format_name(fmt) != "F32":
            args += ["FORMAT", codec.format_name(fmt)]
    if seed is not None:
        args += ["SEED", int(seed)]
    if optim is not None:
        args += ["OPTIM", str(optim).upper()]
    for k, v in hyper.items():
        if k.lower() not in _HYPER:
            raise TypeError("unknown PS.CREATE option %r" % k)
        args += [k.upper(), v.upper() if isinstance(v, str) else _num(v)]
    if nx:
        args.append("NX")
    return args


class Tensor:
    """One PS tensor at 'key'. Methods map one-to-one onto the PS.* commands; server errors
    raise PSError (StaleError for STALE) with the server's code."""

    def __init__(self, r: Client, key: str):
        self.r = r
        self.key = key
        self._shape: Optional[Tuple[int, ...]] = None

    def __repr__(self) -> str:
        return "Tensor(%r)" % self.key

    def create(self, shape: Sequence[int], init: Any = None, data: Optional[ArrayLike] = None,
               fmt: str = "F32", seed: Optional[int] = None, optim: Optional[str] = None,
               nx: bool = False, **hyper: Any) -> bool:
        """PS.CREATE: 'init' is "zeros", "xavier", "he" or a tuple such as ("uniform", lo, hi);
        'data' initial values (sent in 'fmt'); 'hyper' LR, MOMENTUM, ..., SYNC, TIMEOUT as
        keywords (lr=0.1, policy="scale"). Returns True, or False when 'nx' and the key exists."""
        reply = _call(self.r, *_create_args(self.key, shape, init, data, fmt, seed, optim, nx,
                                            **hyper), key=self.key)
        self._shape = tuple(int(d) for d in shape) if reply is not None else None
        return reply is not None

    @property
    def shape(self) -> Tuple[int, ...]:
        """The tensor's shape (read once with PS.INFO, then cached)."""
        if self._shape is None:
            self._shape = tuple(int(d) for d in self.info()["shape"])
        return self._shape

    def pull(self, fmt: str = "F32", rows: Optional[ArrayLike] = None, at: Optional[str] = None,
             minversion: Optional[int] = None, timeout_ms: Optional[int] = None,
             reshape: bool = True) -> Optional[Tuple[int, np.ndarray]]:
        """PS.PULL: (version, values). F32 values are a zero-copy, read-only view of the reply
        (np.array(v) for a writable copy). With 'rows', only those rows (in that order). None
        when a MINVERSION wait timed out."""
        f = codec.format_name(fmt)
        args: List[Any] = ["PS.PULL", self.key]
        if f != "F32":
            args += ["FORMAT", f]
        if rows is not None:
            args += ["ROWS", codec.rows_blob(rows)]
        if at is not None:
            args += ["AT", at]
        if minversion is not None:
            args += ["MINVERSION", int(minversion)]
            if timeout_ms is not None:
                args += ["TIMEOUT", int(timeout_ms)]
        reply = _call(self.r, *args, key=self.key)
        if reply is None:
            return None
        version, blob = int(reply[0]), reply[1]
        shape = self.shape if reshape else None
        if shape is not None and rows is not None:
            shape = (len(np.asarray(rows).reshape(-1)),) + shape[1:]
        n = int(np.prod(shape)) if shape is not None else (len(blob) // 4 if f == "F32" else -1)
        if n < 0:
            raise ValueError("reshape=False needs FORMAT F32")
        values = codec.decode(f, blob, n)
        return version, values.reshape(shape) if shape is not None else values

    def push(self, grad: Union[ArrayLike, bytes], fmt: str = "F32",
             rows: Optional[ArrayLike] = None, version: Optional[int] = None,
             id: Optional[Tuple[str, int]] = None, scale: Optional[float] = None,
             topk: Optional[int] = None) -> int:
        """PS.PUSHGRAD: applies 'grad' (an array encoded in 'fmt', or a ready blob) and returns
        the new version. TOPK sends the 'topk' entries of largest magnitude. 'version' is the
        version the gradient was computed from; 'id' = (client, seq) makes it exactly-once."""
        args = push_args(self.key, grad, fmt, rows, version, id, scale, topk)
        return int(_call(self.r, *args, key=self.key))

    def set(self, values: Union[ArrayLike, bytes], fmt: str = "F32") -> int:
        """PS.SET: overwrite all values (optimizer state kept); returns the new version."""
        blob = values if isinstance(values, bytes) else codec.encode(fmt, values)
        args: List[Any] = ["PS.SET", self.key, blob]
        if codec.format_name(fmt) != "F32":
            args += ["FORMAT", codec.format_name(fmt)]
        return int(_call(self.r, *args, key=self.key))

    def info(self) -> Dict[str, Any]:
        """PS.INFO as a dict (shape a list of ints, doubles as float, counters as int)."""
        return _info_dict(_call(self.r, "PS.INFO", self.key, key=self.key))

    def version(self) -> int:
        """The current version (PS.INFO)."""
        return int(self.info()["version"])

    def config(self, **params: Any) -> None:
        """PS.CONFIG: change hyper-parameters and policies (lr=0.01, policy="scale", sync=4);
        all pairs are checked by the server first, then all or none applied."""
        if not params:
            raise TypeError("config needs at least one parameter")
        args: List[Any] = ["PS.CONFIG", self.key]
        for k, v in params.items():
            args += [k.upper(), v.upper() if isinstance(v, str) else _num(v)]
        _call(self.r, *args, key=self.key)

    def snapshot(self, name: str, time_ms: Optional[int] = None) -> Any:
        """PS.SNAPSHOT: keep a named copy of the values (TIME unix-ms optional)."""
        args: List[Any] = ["PS.SNAPSHOT", self.key, name]
        if time_ms is not None:
            args += ["TIME", int(time_ms)]
        return _call(self.r, *args, key=self.key)

    def snapshots(self) -> List[Any]:
        """PS.SNAPSHOTS: the snapshots of the tensor, as the server lists them."""
        return [[_s(x) for x in e] if isinstance(e, list) else _s(e)
                for e in _call(self.r, "PS.SNAPSHOTS", self.key, key=self.key)]

    def rollback(self, name: str) -> Any:
        """PS.ROLLBACK: restore snapshot 'name'."""
        return _call(self.r, "PS.ROLLBACK", self.key, name, key=self.key)

    def drop_snapshot(self, name: str) -> Any:
        """PS.DROPSNAPSHOT: forget snapshot 'name'."""
        return _call(self.r, "PS.DROPSNAPSHOT", self.key, name, key=self.key)

    def delete(self) -> int:
        """DEL the key; returns 1 when it existed."""
        self._shape = None
        return int(_call(self.r, "DEL", self.key, key=self.key))


def push_args(key: str, grad: Union[ArrayLike, bytes], fmt: str = "F32",
              rows: Optional[ArrayLike] = None, version: Optional[int] = None,
              id: Optional[Tuple[str, int]] = None, scale: Optional[float] = None,
              topk: Optional[int] = None) -> List[Any]:
    """The PS.PUSHGRAD argument list for one push (see Tensor.push)."""
    f = codec.format_name(fmt)
    if isinstance(grad, (bytes, bytearray, memoryview)):
        blob = bytes(grad)
    elif f == "TOPK":
        g = codec.as_f32(grad)
        blob = codec.encode_topk(g, topk if topk is not None else codec.topk_count(len(g), 0.01))
    else:
        blob = codec.encode(f, grad)
    args: List[Any] = ["PS.PUSHGRAD", key, blob]
    if f != "F32":
        args += ["FORMAT", f]
    if rows is not None:
        args += ["ROWS", codec.rows_blob(rows)]
    if version is not None:
        args += ["VERSION", int(version)]
    if id is not None:
        args += ["ID", id[0], int(id[1])]
    if scale is not None and scale != 1.0:
        args += ["SCALE", "%.9g" % float(scale)]
    return args
