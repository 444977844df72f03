"""Server-side optimizers against a numpy float32 reference of the rules in module/core/optim.c's
header comment: SGD, MOMENTUM, NESTEROV, ADAGRAD, RMSPROP, ADAM, ADAMW, each plain, with WD,
with CLIPNORM and with both, over 20 pushes (with SCALE and staleness scaling mixed in).
The reference does one float32 rounding per operation in the documented order, so the
result is expected to be bit-exact; the contract (issue 4) is 1e-6 relative."""

import math

import numpy as np
import pytest

import psserver
from pshelpers import create_data, digest, info, pull_np, push

F = np.float32
OPTIMS = ["SGD", "MOMENTUM", "NESTEROV", "ADAGRAD", "RMSPROP", "ADAM", "ADAMW"]
NSTATE = {"SGD": 0, "MOMENTUM": 1, "NESTEROV": 1, "ADAGRAD": 1, "RMSPROP": 1, "ADAM": 2,
          "ADAMW": 2}


# ---------------------------------------------------------------------------
# The reference
# ---------------------------------------------------------------------------

def sum_squares(g):
    """ps_sum_squares: 8 interleaved double partial sums, each accumulated in element order,
    combined as ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7))."""
    x = np.asarray(g, dtype=np.float32).reshape(-1).astype(np.float64)
    acc = [0.0] * 8
    for j in range(8):
        part = x[j::8]
        if part.size:
            acc[j] = float(np.add.accumulate(part * part)[-1])
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))


class RefOptimizer:
    """numpy float32 model of one tensor's optimizer (values and state)."""

    def __init__(self, kind, w, lr=0.01, momentum=0.9, beta1=0.9, beta2=0.999, eps=1e-8,
                 wd=0.0, clipnorm=0.0):
        self.kind = kind
        self.w = np.array(w, dtype=np.float32).reshape(-1)
        self.h = dict(lr=lr, momentum=momentum, beta1=beta1, beta2=beta2, eps=eps, wd=wd,
                      clipnorm=clipnorm)
        n = self.w.size
        self.s0 = np.zeros(n, np.float32)
        self.s1 = np.zeros(n, np.float32)
        self.b1pow = 1.0
        self.b2pow = 1.0
        self.step = 0

    def push(self, g, scale=1.0, staleness=0, scale_policy=False):
        h = self.h
        g = np.asarray(g, dtype=np.float32).reshape(-1)
        lr_eff = h["lr"] * scale
        if scale_policy:
            lr_eff = lr_eff / float(1 + staleness)
        gscale = 1.0
        if h["clipnorm"] > 0:
            norm = math.sqrt(sum_squares(g))
            if norm > h["clipnorm"]:
                gscale = h["clipnorm"] / norm
        self.step += 1
        self.b1pow *= h["beta1"]
        self.b2pow *= h["beta2"]
        adamw = self.kind == "ADAMW"
        lr = F(lr_eff)
        gs = F(gscale)
        wd = F(0.0) if adamw else F(h["wd"])
        mu = F(h["momentum"])
        b1, omb1 = F(h["beta1"]), F(1.0 - h["beta1"])
        b2, omb2 = F(h["beta2"]), F(1.0 - h["beta2"])
        eps = F(h["eps"])
        plain = gs == F(1.0) and wd == F(0.0)
        w = self.w
        if adamw:
            d = g * gs
        elif plain:
            d = g
        else:
            d = g * gs + wd * w
        k = self.kind
        if k == "SGD":
            self.w = w - lr * d
        elif k == "MOMENTUM":
            v = mu * self.s0 + d
            self.s0 = v
            self.w = w - lr * v
        elif k == "NESTEROV":
            v = mu * self.s0 + d
            self.s0 = v
            self.w = w - lr * (d + mu * v)
        elif k == "ADAGRAD":
            a = self.s0 + d * d
            self.s0 = a
            self.w = w - lr * (d / (np.sqrt(a) + eps))
        elif k == "RMSPROP":
            a = b2 * self.s0 + omb2 * (d * d)
            self.s0 = a
            self.w = w - lr * (d / (np.sqrt(a) + eps))
        elif k in ("ADAM", "ADAMW"):
            step = F(lr_eff / (1.0 - self.b1pow))
            rbc2 = F(1.0 / math.sqrt(1.0 - self.b2pow))
            if adamw:
                w = w * F(1.0 - lr_eff * h["wd"])
            m = b1 * self.s0 + omb1 * d
            v = b2 * self.s1 + omb2 * (d * d)
            self.s0, self.s1 = m, v
            self.w = w - step * (m / (np.sqrt(v) * rbc2 + eps))
        else:
            raise ValueError(k)
        assert self.w.dtype == np.float32
        return self.w


def create_args(kind, h):
    args = ["OPTIM", kind]
    for name in ("lr", "momentum", "beta1", "beta2", "eps", "wd", "clipnorm"):
        args += [name.upper(), repr(float(h[name]))]
    return args


def assert_close(got, want, rtol=1e-6, what=""):
    got = np.asarray(got, dtype=np.float32)
    want = np.asarray(want, dtype=np.float32)
    denom = np.maximum(np.abs(want), F(1e-30))
    rel = np.abs(got.astype(np.float64) - want.astype(np.float64)) / denom
    # Elements near zero: absolute tolerance of rtol.
    bad = (rel > rtol) & (np.abs(got - want) > rtol)
    assert not bad.any(), "%s: %d elements off, worst at %d: got %r want %r" % (
        what, int(bad.sum()), int(np.argmax(rel)), float(got.reshape(-1)[np.argmax(rel)]),
        float(want.reshape(-1)[np.argmax(rel)]))


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------

VARIANTS = {
    "plain": dict(wd=0.0, clipnorm=0.0),
    "wd": dict(wd=0.01, clipnorm=0.0),
    "clip": dict(wd=0.0, clipnorm=6.0),
    "wd+clip": dict(wd=0.05, clipnorm=6.0),
}


def run_training(r, key, kind, variant, seed, shape=(13, 11), pushes=20):
    """Create 'key' with random weights and the variant's hyper-parameters, push 'pushes'
    random gradients (some large enough to be clipped, some with SCALE), and compare
    every pulled value with the reference. Returns (reference, list of max rel errors,
    number of bit-exact pulls)."""
    rng = np.random.default_rng(seed)
    w0 = rng.uniform(-1, 1, shape).astype(np.float32)
    h = dict(lr=0.01, momentum=0.8, beta1=0.85, beta2=0.99, eps=1e-7, **VARIANTS[variant])
    if kind in ("ADAGRAD", "RMSPROP"):
        h["lr"] = 0.05
    ref = RefOptimizer(kind, w0, **h)
    assert create_data(r, key, w0, *create_args(kind, h)) in (b"OK", "OK")
    exact = 0
    for i in range(pushes):
        # Magnitudes vary so that with CLIPNORM 6 some pushes are clipped and some not
        # (a 143-element N(0,1) gradient has norm ~12).
        mag = [0.1, 1.0, 3.0, 0.3][i % 4]
        g = (rng.standard_normal(shape) * mag).astype(np.float32)
        if i % 7 == 3:
            g[0, 0] = 0.0
        extra = []
        scale = 1.0
        if i % 5 == 2:
            scale = 0.5
            extra = ["SCALE", "0.5"]
        assert push(r, key, g, *extra) == i + 1
        want = ref.push(g, scale=scale)
        v, got = pull_np(r, key)
        assert v == i + 1
        assert_close(got, want, what="%s/%s after push %d" % (kind, variant, i + 1))
        exact += got.tobytes() == want.tobytes()
    assert int(info(r, key)["step"]) == pushes
    # The reference is not trivially the start: the weights moved.
    assert not np.array_equal(ref.w, w0.reshape(-1))
    return ref, exact


@pytest.mark.parametrize("kind", OPTIMS)
def test_optimizer_matches_numpy_float32_reference_over_20_pushes(r, kind):
    for vi, variant in enumerate(VARIANTS):
        run_training(r, "w:%s:%s" % (kind, variant), kind, variant, seed=100 + vi)


@pytest.mark.parametrize("kind", OPTIMS)
def test_optimizer_is_bit_exact_with_the_documented_operation_order(r, kind):
    """Stronger than the 1e-6 contract: the kernels and the reference round the same
    operations in the same order, so every pulled value has identical bits."""
    for vi, variant in enumerate(VARIANTS):
        _, exact = run_training(r, "b:%s:%s" % (kind, variant), kind, variant, seed=200 + vi,
                                pushes=10)
        assert exact == 10, "%s/%s: only %d of 10 pulls bit-exact" % (kind, variant, exact)


def test_clipnorm_clips_only_gradients_above_the_norm(r):
    w0 = np.zeros(4, np.float32)
    create_data(r, "c", w0, "OPTIM", "SGD", "LR", "1", "CLIPNORM", "1")
    push(r, "c", np.array([3, 4, 0, 0], np.float32))   # norm 5 -> scaled to norm 1
    _, got = pull_np(r, "c")
    assert_close(got, [-0.6, -0.8, 0, 0], rtol=1e-6, what="clipped")
    assert abs(np.linalg.norm(got.astype(np.float64)) - 1.0) < 1e-6
    push(r, "c", np.array([0, 0, 0.3, 0.4], np.float32))  # norm 0.5: untouched
    _, got2 = pull_np(r, "c")
    assert got2[2] == F(0) - F(0.3) and got2[3] == F(0) - F(0.4)


def test_adam_state_persists_across_hyper_parameter_changes(r):
    """PS.CONFIG LR mid-training changes the step from the next push on; the Adam moments
    and bias-correction products carry on (the reference does the same)."""
    rng = np.random.default_rng(5)
    w0 = rng.uniform(-1, 1, 64).astype(np.float32)
    ref = RefOptimizer("ADAM", w0, lr=0.01)
    create_data(r, "a", w0, "OPTIM", "ADAM", "LR", "0.01")
    for i in range(12):
        if i == 6:
            assert r.execute_command("PS.CONFIG", "a", "LR", "0.002") in (b"OK", "OK")
            ref.h["lr"] = 0.002
        g = rng.standard_normal(64).astype(np.float32)
        push(r, "a", g)
        ref.push(g)
    _, got = pull_np(r, "a")
    assert got.tobytes() == ref.w.tobytes()


def test_staleness_scale_policy_matches_reference(r):
    rng = np.random.default_rng(9)
    w0 = rng.uniform(-1, 1, 32).astype(np.float32)
    ref = RefOptimizer("MOMENTUM", w0, lr=0.1, momentum=0.9)
    create_data(r, "s", w0, "OPTIM", "MOMENTUM", "LR", "0.1", "MAXSTALENESS", "1",
                "POLICY", "SCALE")
    version = 0
    for i, stale in enumerate([0, 0, 1, 2, 4, 0, 3]):
        g = rng.standard_normal(32).astype(np.float32)
        assert push(r, "s", g, "VERSION", str(version - stale), "SCALE", "2") == version + 1
        ref.push(g, scale=2.0, staleness=stale, scale_policy=stale > 1)
        version += 1
        _, got = pull_np(r, "s")
        assert got.tobytes() == ref.w.tobytes(), "after push %d (staleness %d)" % (i, stale)
    assert int(info(r, "s")["scaled_pushes"]) == 3


def test_master_replica_and_aof_agree_bit_for_bit_for_every_optimizer(make_server, make_replica):
    """The heavy optimizers with clipping and decay replay to identical bits on a replica and
    after an AOF restart (verbatim replication of PS.PUSHGRAD)."""
    m = make_server(["--appendonly", "yes", "--aof-use-rdb-preamble", "no"])
    rep = make_replica(m)
    c = m.client()
    rng = np.random.default_rng(3)
    for kind in OPTIMS:
        create_data(c, kind, rng.uniform(-1, 1, 300).astype(np.float32), "OPTIM", kind,
                    "WD", "0.01", "CLIPNORM", "5", "LR", "0.01")
        for _ in range(15):
            push(c, kind, (rng.standard_normal(300) * 2).astype(np.float32))
    psserver.wait_for_replication(m, [rep])
    rc = rep.client()
    before = {k: digest(c, k) for k in OPTIMS}
    for k in OPTIMS:
        assert digest(rc, k) == before[k], k
    m.restart()
    c = m.client()
    for k in OPTIMS:
        assert digest(c, k) == before[k], k
