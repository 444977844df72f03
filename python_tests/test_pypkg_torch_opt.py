"""redis_ps.torch.PSOptimizer against a real server (skipped without PyTorch: Debian's
python3-torch): steps match torch's own optimizers, an lr_scheduler changes the server's lr,
state_dict round-trips bit-exactly, pretrained weights load in one call, a job of another
architecture is refused naming the tensor before anything is written, a NaN step sends
nothing, overlap keeps pushes naming the versions they were computed from, buffers sync."""

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from pshelpers_pkg import redis_ps  # noqa: E402

from redis_ps import NonFiniteGradient, SchemaError, Tensor  # noqa: E402
from redis_ps.torch import PSOptimizer  # noqa: E402


def mlp(seed=0, hidden=16):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 3))


def batch(i):
    g = torch.Generator().manual_seed(100 + i)
    return torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)


def train(net, opt, steps, start=0, sched=None):
    for i in range(start, start + steps):
        x, y = batch(i)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        if sched is not None:
            sched.step()



def test_import_redis_ps_then_torch_attribute():
    import redis_ps as rp
    assert rp.torch.PSOptimizer is PSOptimizer
    assert issubclass(PSOptimizer, torch.optim.Optimizer)


@pytest.mark.parametrize("kind,kw,ref", [
    ("sgd", dict(lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    ("sgd", dict(lr=0.05, momentum=0.9, weight_decay=1e-3),
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3)),
    ("adam", dict(lr=0.01, betas=(0.8, 0.99)), lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99))),
    ("adamw", dict(lr=0.01), lambda p: torch.optim.AdamW(p, lr=0.01)),
])
def test_steps_match_torchs_own_optimizer(server, kind, kw, ref):
    r = redis_ps.connect(server.addr)
    net, local = mlp(), mlp()
    opt = PSOptimizer(net, r, "m" + kind + str(len(kw)), optimizer=kind, overlap=False,
                      partition_bytes=256, **kw)
    assert len(opt.model.keys()) > 4
    lopt = ref(local.parameters())
    train(net, opt, 5)
    train(local, lopt, 5)
    for (n, a), (_, b) in zip(net.named_parameters(), local.named_parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=2e-5,
                                   atol=2e-6, err_msg=n)


def test_overlap_computes_each_step_from_one_pulled_model_and_names_its_versions(server):
    r = redis_ps.connect(server.addr)
    net = mlp()
    opt = PSOptimizer(net, r, "ov", lr=0.1, partition_bytes=256)
    assert opt.overlap
    keys = opt.model.keys()
    sent = []
    real = opt.model.prepare_push

    def spy(grads, **kw):
        sent.append(dict(kw["part_versions"]))
        return real(grads, **kw)
    opt.model.prepare_push = spy
    train(net, opt, 6)
    opt.synchronize()
    # one worker: the gradient of step k comes from the model after step k-2's push
    assert [sorted(set(v.values())) for v in sent] == [[0], [0], [1], [2], [3], [4]]
    assert all(set(v) == set(keys) for v in sent)
    vals = opt.model.pull()
    for n, p in net.named_parameters():
        assert p.detach().numpy().tobytes() == vals[n].tobytes()
    assert {Tensor(r, k).version() for k in keys} == {6}
    assert opt.stats["steps"] == 6
    opt.close()


def test_lr_scheduler_changes_the_servers_lr(server):
    r = redis_ps.connect(server.addr)
    net = mlp()
    opt = PSOptimizer(net, r, "sched", optimizer="adam", lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = []
    for i in range(6):
        train(net, opt, 1, start=i, sched=sched)
        opt.synchronize()
        lrs.append(Tensor(r, "sched:0.weight:0").info()["lr"])
    assert lrs == [0.01, 0.005, 0.005, 0.0025, 0.0025, 0.00125]
    assert all(Tensor(r, k).info()["lr"] == 0.00125 for k in opt.model.keys())
    # any scheduler: cosine annealing through the generic param_groups protocol
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
    for i in range(2):
        train(net, opt, 1, start=10 + i, sched=cos)
    opt.synchronize()
    assert Tensor(r, "sched:2.bias:0").info()["lr"] == pytest.approx(opt.param_groups[0]["lr"])
    opt.param_groups[0]["betas"] = (0.5, 0.9)
    opt.synchronize()
    info = Tensor(r, "sched:2.bias:0").info()
    assert (info["beta1"], info["beta2"]) == (0.5, 0.9)
    with pytest.raises(ValueError):
        opt.param_groups[0]["lr"] = -1.0
        opt.step()
    opt.param_groups[0]["lr"] = 0.001


def test_state_dict_round_trip_is_bit_exact(server):
    r = redis_ps.connect(server.addr)
    net = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.BatchNorm1d(16),
                              torch.nn.Linear(16, 3))
    opt = PSOptimizer(net, r, "ckpt", optimizer="adam", lr=0.01, partition_bytes=256)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.1)
    train(net, opt, 4, sched=sched)
    sd = opt.state_dict()
    want = {n: v.numpy().tobytes() for n, v in sd["redis_ps"]["values"].items()}
    rm = sd["redis_ps"]["buffers"]["1.running_mean"].clone()
    assert sd["param_groups"][0]["lr"] == pytest.approx(0.001)
    torch.save(sd, "/dev/null")                                   # picklable
    train(net, opt, 3, start=4)
    opt.param_groups[0]["lr"] = 0.5
    opt.synchronize()
    assert opt.model.pull()["0.weight"].tobytes() != want["0.weight"]
    opt.load_state_dict(sd)
    got = opt.model.pull()
    for n, b in want.items():
        assert got[n].tobytes() == b, n
        assert dict(net.named_parameters())[n].detach().numpy().tobytes() == b, n
    assert torch.equal(net[1].running_mean, rm)
    assert Tensor(r, "ckpt:0.weight:0").info()["lr"] == pytest.approx(0.001)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.001)
    # and into a fresh optimizer of a fresh process's module (another job name)
    net2 = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.BatchNorm1d(16),
                               torch.nn.Linear(16, 3))
    opt2 = PSOptimizer(net2, r, "ckpt2", optimizer="adam", lr=0.01, partition_bytes=256)
    opt2.load_state_dict(sd)
    for n, p in net2.named_parameters():
        assert p.detach().numpy().tobytes() == want[n], n


def test_load_pretrained_in_one_call(server):
    r = redis_ps.connect(server.addr)
    pre = mlp(seed=5)
    net = mlp(seed=6)
    opt = PSOptimizer(net, r, "pre", lr=0.1, partition_bytes=128)
    opt.load_pretrained(pre)
    for (n, a), (_, b) in zip(net.named_parameters(), pre.named_parameters()):
        assert torch.equal(a, b), n
    other = PSOptimizer(mlp(seed=7), r, "pre", lr=0.1, partition_bytes=128)
    for (n, a), (_, b) in zip(other.module.named_parameters(), pre.named_parameters()):
        assert torch.equal(a, b), n                              # a second worker sees them
    bad = dict(pre.state_dict())
    bad["0.weight"] = torch.zeros(3, 3)
    v = Tensor(r, "pre:0.bias:0").version()
    with pytest.raises(SchemaError) as ei:
        opt.load_pretrained(bad)
    assert ei.value.tensor == "0.weight"
    assert Tensor(r, "pre:0.bias:0").version() == v                # nothing written


def test_another_architecture_under_the_same_job_is_refused_naming_the_tensor(server):
    r = redis_ps.connect(server.addr)
    PSOptimizer(mlp(hidden=16), r, "arch", lr=0.1)
    with pytest.raises(SchemaError) as ei:
        PSOptimizer(mlp(hidden=20), r, "arch", lr=0.1)
    assert ei.value.tensor == "0.weight" and "arch:0.weight:0" in str(ei.value)
    with pytest.raises(SchemaError) as ei:
        PSOptimizer(mlp(hidden=16), r, "arch", optimizer="adam")
    assert "optimizer sgd" in str(ei.value)
    r.set("typed:0.weight:0", "x")
    with pytest.raises(redis_ps.WrongTypeError):
        PSOptimizer(mlp(), r, "typed", lr=0.1)
    assert r.exists("typed:0.bias:0") == 0
    with pytest.raises(TypeError):
        PSOptimizer(mlp(), r, "kw", wd=0.1)                        # torch spells it weight_decay


def test_a_nan_step_sends_nothing(server):
    r = redis_ps.connect(server.addr)
    net = mlp()
    opt = PSOptimizer(net, r, "nan", lr=0.1, overlap=False)
    train(net, opt, 1)
    keys = opt.model.keys()
    x, y = batch(0)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    net[2].bias.grad[1] = math.inf
    with pytest.raises(NonFiniteGradient) as ei:
        opt.step()
    assert ei.value.tensors == ["2.bias"]
    assert {Tensor(r, k).version() for k in keys} == {1}
    skip = PSOptimizer(net, r, "nan", lr=0.1, overlap=False, nonfinite="skip")
    skip.step()
    assert skip.stats["skipped_steps"] == 1
    assert {Tensor(r, k).version() for k in keys} == {1}


def test_buffers_push_and_pull(server):
    r = redis_ps.connect(server.addr)

    def bn():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(12, 4), torch.nn.BatchNorm1d(4))
    a, b = bn(), bn()
    oa = PSOptimizer(a, r, "bn", lr=0.1, buffers="push", overlap=False)
    ob = PSOptimizer(b, r, "bn", lr=0.1, buffers="pull", overlap=False)
    x = torch.randn(8, 12)
    a(x).sum().backward()
    oa.step()
    ob.step()
    assert torch.equal(a[1].running_mean, b[1].running_mean)
    assert float(a[1].running_mean.abs().sum()) > 0


def test_float64_parameters_warn(server):
    r = redis_ps.connect(server.addr)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        net = mlp().double()
        opt = PSOptimizer(net, r, "f64", lr=0.1)
    assert any("float64" in str(x.message) for x in w)
    x, y = batch(0)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(x.double()), y).backward()
    opt.step()
    opt.synchronize()
    assert net[0].weight.dtype == torch.float64
    assert np.array_equal(net[0].weight.detach().numpy().astype(np.float32),
                          opt.model.pull()["0.weight"])


def test_the_readme_loop_runs_as_written(server, tmp_path, monkeypatch):
    """python/README.md's PyTorch loop, verbatim, with three batches and this server."""
    import os
    import re
    import psserver
    text = open(os.path.join(psserver.REPO_ROOT, "python", "README.md"), encoding="utf-8").read()
    sec = text.split("## PyTorch: PSOptimizer", 1)[1]
    code = re.search(r"```python\n(.*?)```", sec, re.S).group(1)
    assert len(code.strip().splitlines()) <= 25
    code = code.replace("127.0.0.1:6379", server.addr)
    monkeypatch.chdir(tmp_path)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.rand(64, 784, generator=g), torch.randint(0, 10, (64,), generator=g))
               for _ in range(3)]
    env = {"batches": batches}
    exec(compile(code, "python/README.md", "exec"), env)
    assert os.path.exists("ckpt.pt")
    opt = env["opt"]
    assert opt.stats["steps"] == 3
    sd = torch.load("ckpt.pt")
    assert set(sd["redis_ps"]["values"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    opt.close()


def test_redis_ps_torch_is_an_attribute_after_import_redis_ps():
    import subprocess
    import sys
    import pshelpers_pkg
    code = ("import sys; sys.path.insert(0, %r); import redis_ps; "
            "print(redis_ps.torch.ModulePS.__name__, redis_ps.torch.PSOptimizer.__name__)"
            % pshelpers_pkg.TREE)
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         timeout=120).stdout
    assert out.split() == ["ModulePS", "PSOptimizer"]


@pytest.mark.parametrize("overlap", [False, True])
def test_ctrl_c_inside_step_never_half_applies_it(server, overlap):
    """30 steps, each with a SIGINT at a random moment inside opt.step(); afterwards every
    partition is at the same version."""
    import signal
    import threading
    import time
    r = redis_ps.connect(server.addr)
    net = torch.nn.Sequential(torch.nn.Linear(100, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = PSOptimizer(net, r, "intr%d" % overlap, lr=0.01, partition_bytes=2048,
                      overlap=overlap)
    keys = opt.model.keys()
    assert len(keys) >= 8
    x, y = torch.randn(16, 100), torch.randint(0, 10, (16,))

    def grad():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
    grad()
    t0 = time.perf_counter()
    for _ in range(5):
        opt.step()
    dur = (time.perf_counter() - t0) / 5
    rng = np.random.default_rng(3)
    main = threading.main_thread().ident
    for i in range(30):
        grad()
        timer = threading.Timer(float(rng.uniform(0, dur)), signal.pthread_kill,
                                (main, signal.SIGINT))
        try:
            timer.start()
            opt.step()
            timer.join()
            time.sleep(0.05)                     # an interrupt after step() lands here
        except KeyboardInterrupt:
            timer.join()
        opt.synchronize()
        vs = {Tensor(r, k).version() for k in keys}
        assert len(vs) == 1, "try %d: versions %s" % (i, vs)
    opt.close()
