"""redis_ps: Python client of redis-ps, the Redis parameter server.

    import numpy as np, redis_ps
    r = redis_ps.connect("127.0.0.1:6379")          # redis.Redis, or RedisCluster
    w = redis_ps.Tensor(r, "w")
    w.create((4, 3), init="he", seed=7, optim="sgd", lr=0.1)
    version, values = w.pull()                      # numpy float32, shape (4, 3)
    w.push(np.ones((4, 3)), fmt="BF16", version=version)

Model partitions a job's tensors over keys exactly as libps does, so Python and C workers
can train the same job; redis_ps.codec holds the wire formats, byte-identical to the C
codecs; Embedding shards an embedding table by id exactly as libps psEmbed does;
redis_ps.torch (needs PyTorch) has PSOptimizer, a torch.optim.Optimizer whose step runs on
the server; TaskStream hands out ps-train's data shards (leases, claims) to Python workers.
"""

from . import client, codec  # noqa: F401  (redis_ps.client.X works as it always did)
from .conn import connect
from .guards import check_ids
from .model import DEFAULT_PARTITION_BYTES, Model, Partition
from .tensor import Tensor, push_args
from .embed import Embedding
from .errors import (DurabilityError, InvalidIds, ModuleNotLoaded, NonFiniteGradient, PSError,
                     SchemaError, ServerUnavailable, StaleError, WrongTypeError)
from .tasks import Task, TaskStream

__version__ = "0.1.0"
__all__ = ["codec", "client", "connect", "Tensor", "Model", "Embedding", "Partition", "PSError", "StaleError",
           "ModuleNotLoaded", "ServerUnavailable", "SchemaError", "WrongTypeError", "InvalidIds",
           "NonFiniteGradient", "DurabilityError", "Task", "TaskStream", "check_ids",
           "push_args", "DEFAULT_PARTITION_BYTES"]


def __getattr__(name: str):
    """redis_ps.torch without an explicit import (it needs PyTorch, so it loads on use)."""
    if name in ("torch", "tasks", "plot"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'redis_ps' has no attribute %r" % name)
