"""The names of redis_ps's client layer in one place, as `redis_ps.client` has always offered
them (embed.py, tasks.py, torch.py and user code import from here). The code lives in:

  conn.py     connect(), _call (server errors as PSError), argument/reply helpers
  guards.py   check_ids (ids checked before they leave), deferred_interrupts (Ctrl-C)
  tensor.py   Tensor (one key, one PS.* command per method), push_args
  model.py    Model (a job's tensors partitioned as libps does), Partition, PushBatch
  score.py    score() and Embedding.score: PS.SCORE serving, libps's psScore bit for bit
"""

import redis.exceptions as rex  # noqa: F401  (kept: redis_ps.client.rex is used by tests)

from .conn import (ArrayLike, Client, _call, _info_dict, _num, _s, connect,  # noqa: F401
                   default_client_id, where)
from .guards import check_ids, deferred_interrupts  # noqa: F401
from .model import (DEFAULT_PARTITION_BYTES, NONFINITE, Model, ModelTensor,  # noqa: F401
                    Partition, PushBatch, rows_of)
from .tensor import _HYPER, Tensor, _create_args, push_args  # noqa: F401

__all__ = ["Tensor", "Model", "Partition", "PushBatch", "connect", "push_args", "rows_of",
           "check_ids", "deferred_interrupts", "DEFAULT_PARTITION_BYTES"]
