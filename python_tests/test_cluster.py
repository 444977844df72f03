"""Redis Cluster smoke test: a ps-tensor on each master via a key that hashes to it, MOVED
from the other masters (the key spec names the key), replicas hold identical bits."""

import numpy as np

import psserver
from pshelpers import create, digest, f32, pull, push


def test_tensor_on_each_master_of_a_3x1_cluster(module_path):
    with psserver.RedisClusterHelper(masters=3, replicas=1, module=module_path) as cl:
        masters = cl.masters()
        assert len(masters) == 3
        keys = {}
        for i, m in enumerate(masters):
            key = cl.key_for(m, prefix="model:layer%d" % i)
            keys[m.port] = key
            c = m.client()
            assert create(c, key, (16, 8), "INIT", "HE", "LR", "0.1") in (b"OK", "OK")
            assert push(c, key, np.ones((16, 8), np.float32)) == 1
            assert pull(c, key)[0] == 1
        for m in masters:
            with m.raw() as raw:
                for port, key in keys.items():
                    if port == m.port:
                        continue
                    err = raw.call("PS.PULL", key)
                    assert isinstance(err, psserver.RespError) and err.code == "MOVED", err
                    assert str(err).endswith(":%d" % port), err
                    err = raw.call("PS.PUSHGRAD", key, f32(np.ones(128)))
                    assert isinstance(err, psserver.RespError) and err.code == "MOVED", err
        for m in masters:
            key = keys[m.port]
            reps = cl.replicas_of(m)
            assert len(reps) == 1
            psserver.wait_for_replication(m, reps)
            mc, rc = m.client(), reps[0].client()
            assert digest(mc, key) == digest(rc, key)
            rc.execute_command("READONLY")
            assert pull(rc, key) == pull(mc, key)
