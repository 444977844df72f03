"""psserver_cluster.py -- Redis Cluster in the integration-test harness (psserver.py):
key_slot (CRC16/XMODEM, hash tags honoured) and RedisClusterHelper (N masters with R
replicas each, created with redis-cli --cluster create and waited on until
cluster_state:ok). Tests import these names from psserver."""

import subprocess

from psserver_node import RedisServer, wait_until
from psserver_proc import REDIS_CLI


# ---------------------------------------------------------------------------
# Redis Cluster
# ---------------------------------------------------------------------------

def _crc16_table():
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return table


_CRC16 = _crc16_table()


def crc16(data):
    """CRC16/XMODEM as Redis Cluster uses it."""
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ b) & 0xFF]
    return crc


def key_slot(key):
    """Hash slot of 'key' (str or bytes), honouring {hash tags}."""
    if isinstance(key, str):
        key = key.encode()
    s = key.find(b"{")
    if s >= 0:
        e = key.find(b"}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    return crc16(key) % 16384


class RedisClusterHelper:
    """'masters' masters with 'replicas' replicas each, cluster-enabled, each in its own temp
    dir; created with redis-cli --cluster create and waited on until cluster_state:ok
    everywhere. Use as a context manager or call cleanup()."""

    def __init__(self, masters=3, replicas=0, args=(), module="default", node_timeout=3000,
                 timeout=90.0):
        # 'timeout' bounds redis-cli --cluster create and the wait for cluster_state:ok; it
        # took over 30 s on 2 cores at a load average of 13.
        self.nodes = []
        self.cli_output = ""
        try:
            for i in range(masters * (1 + replicas)):
                self.nodes.append(RedisServer(
                    args=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                          "--cluster-node-timeout", str(node_timeout)] + list(args),
                    module=module, name="cluster%d" % i))
            cmd = [REDIS_CLI, "--cluster", "create"] + [n.addr for n in self.nodes] + \
                  ["--cluster-replicas", str(replicas), "--cluster-yes"]
            res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, timeout=timeout)
            self.cli_output = res.stdout.decode(errors="replace")
            if res.returncode != 0:
                raise RuntimeError("redis-cli --cluster create failed (%d):\n%s"
                                   % (res.returncode, self.cli_output))
            self.wait_ok(timeout=timeout, n_replicas=masters * replicas)
        except BaseException:
            self.cleanup()
            raise

    def wait_ok(self, timeout=30.0, n_replicas=None):
        """Wait until every node says cluster_state:ok, every node knows all nodes, and (if
        given) 'n_replicas' replicas have their link to the master up."""
        total = len(self.nodes)

        def ok():
            for n in self.nodes:
                c = n.client()
                info = c.execute_command("CLUSTER", "INFO").decode()
                if "cluster_state:ok" not in info:
                    return False
                if "cluster_known_nodes:%d" % total not in info:
                    return False
            if n_replicas is not None:
                up = 0
                for n in self.nodes:
                    rep = n.client().info("replication")
                    if rep.get("role") == "slave" and rep.get("master_link_status") == "up":
                        up += 1
                if up != n_replicas:
                    return False
            return True

        wait_until(ok, timeout=timeout, interval=0.1, what="cluster_state:ok on all nodes")
        if n_replicas:
            self.wait_streaming(timeout)

    def wait_streaming(self, timeout=30.0):
        """Wait until every replica receives its master's command stream: a write (a probe
        key set and deleted, in a slot the master owns) moves the master's replication offset,
        and each replica must reach that offset. After a sync a master streams to a replica
        only once the replica is online (its first REPLCONF ACK); a master killed before that
        leaves its replica with none of what was written meanwhile (a promoted replica
        without the job's keys). PUBLISH cannot serve as the probe: in cluster mode it goes
        over the cluster bus, not into the replication stream (the offset stays put)."""
        for m in self.masters():
            mc = m.client()
            probe = self.key_for(m, "__ps_replica_probe")
            mc.set(probe, "1")
            mc.delete(probe)
            target = mc.info("replication")["master_repl_offset"]
            assert target > 0, "the probe did not move %s's replication offset" % m.addr
            for r in self.replicas_of(m):
                rc = r.client()
                wait_until(lambda: rc.info("replication").get("slave_repl_offset", 0) >= target,
                           timeout=timeout, what="replica %s streaming from %s" % (r.addr, m.addr))

    def masters(self):
        return [n for n in self.nodes if n.client().info("replication")["role"] == "master"]

    def replicas_of(self, master):
        myid = master.client().execute_command("CLUSTER", "MYID").decode()
        out = []
        for n in self.nodes:
            rep = n.client().info("replication")
            if rep.get("role") == "slave" and rep.get("master_port") == master.port:
                out.append(n)
        assert myid
        return out

    def slot_ranges(self, master):
        """[(start, end), ...] owned by 'master' per its own CLUSTER SLOTS view."""
        out = []
        for entry in master.client().execute_command("CLUSTER", "SLOTS"):
            start, end, owner = entry[0], entry[1], entry[2]
            if int(owner[1]) == master.port:
                out.append((int(start), int(end)))
        return out

    def key_for(self, master, prefix="k"):
        """A key name (prefix + '{tag}') whose hash slot 'master' owns."""
        ranges = self.slot_ranges(master)
        for i in range(100000):
            key = "%s{%d}" % (prefix, i)
            s = key_slot(key)
            if any(a <= s <= b for a, b in ranges):
                return key
        raise RuntimeError("no key found for %s" % master.addr)

    def node_for_key(self, key):
        s = key_slot(key)
        for m in self.masters():
            if any(a <= s <= b for a, b in self.slot_ranges(m)):
                return m
        raise RuntimeError("no master owns slot %d" % s)

    def cleanup(self):
        for n in self.nodes:
            n.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()
