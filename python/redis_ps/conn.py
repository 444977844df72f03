"""Connecting to a redis-ps server and calling it: connect(), the error mapping every handle
shares (_call), and the argument and reply helpers (numbers as the server parses them,
PS.INFO replies as dicts, libps's client id)."""

from __future__ import annotations

import os
import random
import socket
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
import redis
import redis.exceptions as rex

from .errors import ModuleNotLoaded, ServerUnavailable, from_response

ArrayLike = Union[np.ndarray, Sequence[float]]
Client = Union[redis.Redis, "redis.cluster.RedisCluster"]


def where(r: Any) -> str:
    """"host:port" of a redis-py client (for messages)."""
    try:
        kw = r.connection_pool.connection_kwargs
        return "%s:%s" % (kw.get("host", "?"), kw.get("port", "?"))
    except AttributeError:
        nodes = getattr(r, "startup_nodes", None) or {}
        return ",".join(str(n) for n in nodes) or "the cluster"


def connect(addr: str = "127.0.0.1:6379", check_module: bool = True, **kw: Any) -> Client:
    """A redis-py client for 'addr' ("host:port"): a RedisCluster when that node has cluster
    mode on, else a redis.Redis. Extra keywords go to the client's constructor.

    Raises ServerUnavailable when nothing answers at 'addr', and (with 'check_module')
    ModuleNotLoaded when the server has no redis-ps module, with the MODULE LOAD hint. A
    user whose ACL forbids INFO or COMMAND is taken as standalone and not checked."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    r = redis.Redis(host=host, port=int(port), **kw)
    cluster = False
    try:
        cluster = bool(int(r.info("cluster").get("cluster_enabled", 0)))
    except rex.NoPermissionError:
        pass
    except (rex.ConnectionError, rex.TimeoutError) as e:
        r.close()
        raise ServerUnavailable("%s:%s" % (host, port), e) from None
    except rex.ResponseError as e:
        if "NOPERM" not in str(e) and "no permissions" not in str(e):
            raise from_response(e) from None
    if check_module:
        try:
            try:
                info = r.execute_command("COMMAND", "INFO", "PS.PULL")
            except TypeError:               # redis-py's parser chokes on the nil reply
                info = None
            if isinstance(info, dict):    # redis-py parses the reply into {name: ...}
                missing = not any(k.lower() == "ps.pull" and v for k, v in info.items())
            else:
                missing = not info or info[0] is None
            if missing:
                r.close()
                raise ModuleNotLoaded("%s:%s" % (host, port))
        except rex.NoPermissionError:
            pass
        except rex.ResponseError as e:
            if "NOPERM" not in str(e) and "no permissions" not in str(e):
                raise from_response(e) from None
    if cluster:
        r.close()
        from redis.cluster import RedisCluster
        return RedisCluster(host=host, port=int(port), **kw)
    return r


def _call(r: Any, *args: Any, key: Optional[str] = None) -> Any:
    """r.execute_command(*args), with error replies raised as PSError (code kept) and a
    server that cannot be reached as ServerUnavailable."""
    try:
        return r.execute_command(*args)
    except rex.ResponseError as e:
        err = from_response(e, key)
        if isinstance(err, ModuleNotLoaded):
            err = ModuleNotLoaded(where(r))
        raise err from None
    except (rex.ConnectionError, rex.TimeoutError) as e:
        raise ServerUnavailable(where(r), e) from None


def _num(v: Any) -> str:
    """A number as the server parses it: ints as ints, floats with all 17 digits."""
    if isinstance(v, (bool, np.bool_)):
        return str(int(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


def _s(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _info_dict(reply: Sequence[Any]) -> Dict[str, Any]:
    """PS.INFO's flat field/value array as a dict; doubles (bulk strings in RESP2) as float."""
    out: Dict[str, Any] = {}
    for i in range(0, len(reply) - 1, 2):
        k, v = _s(reply[i]), reply[i + 1]
        if isinstance(v, bytes):
            v = v.decode()
            try:
                v = float(v)
            except ValueError:
                pass
        elif isinstance(v, list):
            v = [_s(x) for x in v]
        out[k] = v
    return out


def default_client_id() -> str:
    """host:pid:8 hex digits, the shape of libps's default client id."""
    return "%s:%d:%08x" % (socket.gethostname()[:63], os.getpid(), random.getrandbits(32))
