"""redis_ps.torch against a real server (skipped when PyTorch is not installed: Debian's
python3-torch): a module's parameters created from its values, SGD steps applied on the
server match torch's own SGD, sparse embedding gradients push only their rows."""


import numpy as np
import pytest

import psserver

torch = pytest.importorskip("torch")
import pshelpers_pkg  # noqa: E402,F401  (the tree's redis_ps, or the installed one)
import redis_ps  # noqa: E402
from redis_ps.torch import ModulePS  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 4, sparse=True)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, ids):
        return self.fc(self.emb(ids).mean(1))


def test_module_steps_on_the_server_match_local_sgd(server):
    torch.manual_seed(0)
    net, ref = Net(), Net()
    ref.load_state_dict(net.state_dict())
    r = redis_ps.connect(server.addr)
    ps = ModulePS(r, "tnet", net, partition_bytes=32)
    assert ps.create("OPTIM SGD LR 0.1") == len(ps.model.keys())
    assert ps.create("OPTIM SGD LR 0.1") == 0                       # NX: second worker
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    ids = torch.tensor([[1, 2, 3], [3, 7, 19]])
    y = torch.tensor([0, 2])
    for _ in range(3):
        ps.pull()
        net.zero_grad()
        torch.nn.functional.cross_entropy(net(ids), y).backward()
        ps.push()
        ps.push_rows("emb.weight")
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(ids), y).backward()
        opt.step()
    ps.pull()
    for (n, a), (_, b) in zip(net.named_parameters(), ref.named_parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=n)
    # Rows no batch touched were never pushed: their partitions stayed at version 0.
    untouched = [p for p in ps.model.tensors["emb.weight"].parts
                 if p.first_row > 7 and p.first_row + p.nrows <= 19]
    assert untouched and all(
        redis_ps.Tensor(r, p.key).version() == 0 for p in untouched)
    net.emb.weight.data.zero_()
    ps.pull_rows("emb.weight", ids)
    u = ids.unique()
    np.testing.assert_allclose(net.emb.weight[u].detach().numpy(),
                               ref.emb.weight[u].detach().numpy(), rtol=1e-5, atol=1e-6)
    assert float(net.emb.weight[0].abs().sum()) == 0.0               # not pulled
