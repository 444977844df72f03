"""Small helpers shared by the redis-ps test files: float32 blobs, pull/info parsing, Redis's
CRC64 for DUMP payloads, running build/ps-train and the C drivers of build/ptools/."""

import contextlib
import json
import os
import re
import struct
import subprocess
import time

import numpy as np
import pytest

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


def subscribe(r, *channels, timeout=5.0):
    """A PubSub of redis-py client 'r' subscribed to 'channels', returned once the server has
    confirmed every subscription, so no event published afterwards is missed."""
    ps = r.pubsub()
    ps.subscribe(*channels)
    subs, deadline = 0, time.monotonic() + timeout
    while subs < len(channels) and time.monotonic() < deadline:
        m = ps.get_message(timeout=0.5)
        if m and m["type"] == "subscribe":
            subs += 1
    assert subs == len(channels), "subscriptions to %r not confirmed" % (channels,)
    return ps


def messages(ps, n, timeout=5.0):
    """The first 'n' messages 'ps' receives within 'timeout' seconds (fewer if they do not come),
    as (channel, data) pairs; closes 'ps'."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = ps.get_message(timeout=0.5)
        if m and m["type"] == "message":
            got.append((m["channel"], m["data"]))
    ps.close()
    return got


# ---------------------------------------------------------------------------
# DUMP payload checksums (test_badinput.py, test_restore_crafted.py)
# ---------------------------------------------------------------------------

def _crc64_table():
    poly = 0x95AC9329AC4BC9B5  # Jones polynomial 0xad93d23594c935a9, reflected
    t = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
        t.append(crc)
    return t


_CRC64 = _crc64_table()


def crc64(data, crc=0):
    """Redis's CRC64 (Jones, reflected, init 0), as in DUMP payload footers."""
    for b in data:
        crc = _CRC64[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def reseal(body):
    """A DUMP payload from 'body' (type byte + value + 2-byte RDB version) with a valid CRC."""
    return bytes(body) + struct.pack("<Q", crc64(body))


# ---------------------------------------------------------------------------
# The ps-train worker (test_train_*.py, test_acl_worker.py, faultlib.py)
# ---------------------------------------------------------------------------

PS_TRAIN = os.environ.get("PS_TRAIN") or os.path.join(psserver.REPO_ROOT, "build", "ps-train")
FASHION = "/usr/share/datasets/fashion-mnist"


def require_ps_train():
    """Fails (never skips) the test when ps-train or the Fashion-MNIST files are missing;
    returns the path of ps-train."""
    if not os.path.exists(PS_TRAIN):
        pytest.fail("%s not found: run make client first" % PS_TRAIN, pytrace=False)
    if not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")):
        pytest.fail("Fashion-MNIST missing: apt-get install dataset-fashion-mnist", pytrace=False)
    return PS_TRAIN


@pytest.fixture(scope="module")
def ps_train():
    """The path of ps-train, checked once per test module (see require_ps_train)."""
    return require_ps_train()


# The synthetic CTR data tool (tools/ps-gen-ctr.c), next to ps-train.
PS_GEN_CTR = os.environ.get("PS_GEN_CTR") or os.path.join(os.path.dirname(PS_TRAIN), "ps-gen-ctr")


def run_gen_ctr(args, timeout=120):
    """Runs ps-gen-ctr with 'args'; fails the test with its output unless it exits 0."""
    p = subprocess.run([PS_GEN_CTR] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout)
    p.out = p.stdout.decode(errors="replace")
    if p.returncode != 0:
        pytest.fail("ps-gen-ctr %s exited %d:\n%s" % (" ".join(map(str, args)), p.returncode,
                                                      p.out), pytrace=False)
    return p


def run_ps_train(args, timeout=120, check=True, env=None):
    """Runs ps-train with 'args' (and environment 'env', default ours); returns the
    CompletedProcess with .out (stdout+stderr as text). With 'check', a non-zero exit fails
    with the output."""
    p = subprocess.run([PS_TRAIN] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout,
                       env=env)
    p.out = p.stdout.decode(errors="replace")
    if check and p.returncode != 0:
        raise AssertionError("ps-train %s exited %d:\n%s" % (" ".join(map(str, args)),
                                                             p.returncode, p.out))
    return p


# ---------------------------------------------------------------------------
# The C drivers of python_tests/tools/*.c, built by `make pytest` into build/ptools/.
# Each prints one JSON document as its last stdout line.
# ---------------------------------------------------------------------------

TOOLS = os.path.join(psserver.REPO_ROOT, "build", "ptools")


def tool(name):
    """The path of driver 'name'; fails the test when it was not built."""
    path = os.path.join(TOOLS, name)
    if not os.path.exists(path):
        pytest.fail("%s not built: run make pytest (it builds build/ptools/*)" % path, pytrace=False)
    return path


def _last_json(stdout):
    out = stdout.decode(errors="replace").strip().splitlines()
    return json.loads(out[-1]) if out else None


def run_tool(name, *args, timeout=120):
    """Run a driver; returns (exit code, parsed JSON of its last stdout line or None, stderr)."""
    p = subprocess.run([tool(name)] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, _last_json(p.stdout), p.stderr.decode(errors="replace")


@contextlib.contextmanager
def tool_in_background(name, *args):
    """Starts driver 'name' with 'args' and yields its Popen, for a test that disturbs the
    servers while the driver runs; the driver is killed if it still runs when the block is
    left (the block normally ends with tool_result)."""
    p = subprocess.Popen([tool(name)] + [str(a) for a in args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def tool_result(p, timeout=120):
    """Waits for a driver of tool_in_background; returns what run_tool returns."""
    out, err = p.communicate(timeout=timeout)
    return p.returncode, _last_json(out), err.decode(errors="replace")
