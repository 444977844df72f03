"""ps-train worker behaviour a user meets directly: an overlapped pull never changes the model
a gradient is computed from (and VERSION names that model), a job name reused with other
settings is refused, a finished job says so, CSV inputs are checked before training, a worker
restarted under its name takes back its own tasks at once, a server without the module is
named at connect, and Ctrl-C says how to resume and exits 130."""

import os
import re
import signal
import subprocess
import time

import pytest

import psserver

PS_TRAIN = os.path.join(psserver.REPO_ROOT, "build", "ps-train")
FASHION = "/usr/share/datasets/fashion-mnist"


@pytest.fixture(scope="module")
def ps_train():
    if not os.path.exists(PS_TRAIN):
        pytest.fail("%s not found: run make first" % PS_TRAIN, pytrace=False)
    if not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")):
        pytest.fail("Fashion-MNIST missing: apt-get install dataset-fashion-mnist", pytrace=False)
    return PS_TRAIN


def run(args, timeout=120, check=True, env_extra=None):
    """Runs ps-train with 'args'; returns the CompletedProcess with .out (stdout+stderr)."""
    env = dict(os.environ)
    env.update(env_extra or {})
    p = subprocess.run([PS_TRAIN] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout,
                       env=env)
    p.out = p.stdout.decode(errors="replace")
    if check and p.returncode != 0:
        raise AssertionError("ps-train %s exited %d:\n%s" % (" ".join(map(str, args)),
                                                             p.returncode, p.out))
    return p


def popen(args, env_extra=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.Popen([PS_TRAIN] + [str(a) for a in args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)


def read_trace(path):
    """[(kind, digest, versions tuple)] of a PS_TRAIN_TRACE file."""
    out = []
    with open(path) as f:
        for line in f:
            kind, digest, *vers = line.split()
            out.append((kind, digest, tuple(int(v) for v in vers)))
    return out


# ---------------------------------------------------------------------------
# Overlap: double-buffered parameters
# ---------------------------------------------------------------------------

def test_overlapped_pull_never_changes_the_model_a_gradient_uses(ps_train, server, tmp_path):
    run(["init", "--addr", server.addr, "--job", "ov", "--layers", "784,32,10", "--limit", 4000,
         "--shard-size", 500, "--batch", 32])
    procs, traces = [], []
    for name in ("A", "B"):
        tr = str(tmp_path / ("trace-%s" % name))
        traces.append(tr)
        # --window 1: every push waits for the previous push's reply, so libps reads (and
        # decodes the overlapped pull) while the gradient's model must stay put.
        procs.append(popen(["work", "--addr", server.addr, "--job", "ov", "--name", name,
                            "--overlap", 1, "--window", 1, "--progress", "none"],
                           env_extra={"PS_TRAIN_TRACE": tr}))
    for p in procs:
        out = p.communicate(timeout=120)[0].decode(errors="replace")
        assert p.returncode == 0, out
    pushes = 0
    for tr in traces:
        last_pull = None
        moved = 0
        for kind, digest, vers in read_trace(tr):
            if kind == "pull":
                if last_pull and vers != last_pull[1]:
                    moved += 1
                last_pull = (digest, vers)
                continue
            assert kind == "push" and last_pull is not None
            # The model the gradient was computed from is byte for byte the last pull, and
            # the VERSION sent with it is that pull's.
            assert (digest, vers) == last_pull, (tr, pushes)
            pushes += 1
        assert moved > 10        # the versions did move between pulls: the check had work
    assert pushes == 8 * 16, pushes          # 8 shards of 500 in batches of 32
