"""The least-privilege worker role of docs/security.md and docs/operations.md section 4: a user with exactly what
`ps-train work` needs for one job trains under it (credentials given with --user/--password
or PS_USER/PS_PASSWORD), and cannot create, delete, snapshot, roll back, overwrite or
reconfigure tensors, touch another job, or administer the server."""

import os

import numpy as np
import pytest

import psserver
from pshelpers import f32, require_ps_train, run_gen_ctr, run_ps_train

JOB = "aclj"


def worker_role(job):
    """The ACL SETUSER rules of the documented worker role for 'job' (docs/security.md,
    docs/operations.md section 4):
    the model's tensors are <job>:*, the job's stream and hashes psjob:{<job>}:*."""
    return ["resetkeys", "~%s:*" % job, "~psjob:{%s}:*" % job, "resetchannels", "-@all",
            "+ps.pull", "+ps.pushgrad",
            "+xreadgroup", "+xack", "+xautoclaim", "+xclaim", "+xpending",
            "+hgetall", "+hset",
            "+cluster|slots", "+info|server"]


def run(args, env_extra=None, timeout=180):
    """ps-train with 'args', without the credentials of our environment, plus 'env_extra'."""
    env = {k: v for k, v in os.environ.items() if k not in ("PS_USER", "PS_PASSWORD")}
    env.update(env_extra or {})
    return run_ps_train(args, timeout=timeout, check=False, env=env)


@pytest.fixture
def job_server(server):
    """A server with job JOB initialized by the default (admin) user and the worker user
    'w' (password 'pw') holding the worker role for JOB."""
    require_ps_train()
    for job in (JOB, "other"):
        p = run(["init", "--addr", server.addr, "--job", job, "--limit", 1000, "--task-samples",
                 500, "--layers", "784,16,10"])
        assert p.returncode == 0, p.out
    c = server.client()
    assert c.execute_command("ACL", "SETUSER", "w", "on", ">pw", *worker_role(JOB))
    c.execute_command("ACL", "LOG", "RESET")
    return server


def model_versions(c, job):
    out = {}
    for k in c.keys("%s:*" % job):
        inf = c.execute_command("PS.INFO", k)
        out[k.decode()] = int(dict(zip(inf[0::2], inf[1::2]))[b"version"])
    return out


def acl_denials(c):
    return [dict(zip(e[0::2], e[1::2])) for e in c.execute_command("ACL", "LOG")]


def check_trained(c, p):
    assert p.returncode == 0, p.out
    assert "ACKED" in p.out, p.out
    done = c.hgetall("psjob:{%s}:done" % JOB)
    assert len(done) == 2, done                   # 1000 samples in shards of 500
    assert c.xpending("psjob:{%s}:tasks" % JOB, "workers")["pending"] == 0
    versions = model_versions(c, JOB)
    assert len(versions) == 4 and all(v > 0 for v in versions.values()), versions
    assert acl_denials(c) == [], acl_denials(c)


def test_worker_trains_under_the_worker_role_with_user_and_password_flags(job_server):
    c = job_server.client()
    other_before = model_versions(c, "other")
    p = run(["work", "--addr", job_server.addr, "--job", JOB, "--user", "w", "--password", "pw",
             "--progress", "none"])
    check_trained(c, p)
    assert model_versions(c, "other") == other_before
    # The worker says which server it trains on, run_id included (+info|server).
    run_id = c.info("server")["run_id"]
    assert "ps-train work: server %s: standalone" % job_server.addr in p.out, p.out
    assert "run_id %s" % run_id in p.out, p.out


def test_worker_takes_credentials_from_ps_user_and_ps_password(job_server):
    c = job_server.client()
    p = run(["work", "--addr", job_server.addr, "--job", JOB, "--progress", "none"],
            env_extra={"PS_USER": "w", "PS_PASSWORD": "pw"})
    check_trained(c, p)


def test_worker_with_a_wrong_password_fails_cleanly_and_changes_nothing(job_server):
    c = job_server.client()
    before = model_versions(c, JOB)
    p = run(["work", "--addr", job_server.addr, "--job", JOB, "--user", "w", "--password", "no",
             "--progress", "none"])
    assert p.returncode != 0, p.out
    assert "AUTH" in p.out or "WRONGPASS" in p.out, p.out
    assert model_versions(c, JOB) == before


def test_worker_role_cannot_work_on_another_job(job_server):
    c = job_server.client()
    before = model_versions(c, "other")
    p = run(["work", "--addr", job_server.addr, "--job", "other", "--user", "w", "--password",
             "pw", "--progress", "none"])
    assert p.returncode != 0, p.out
    assert "NOPERM" in p.out, p.out
    assert model_versions(c, "other") == before


@pytest.mark.parametrize("cmd", [["init", "--limit", 1000, "--reset"], ["snapshot", "--at", "s"]])
def test_worker_role_cannot_run_admin_subcommands(job_server, cmd):
    c = job_server.client()
    digests = {k: psserver.digest(c, k) for k in c.keys("*")}
    p = run([cmd[0], "--addr", job_server.addr, "--job", JOB, "--user", "w", "--password",
             "pw"] + cmd[1:])
    assert p.returncode != 0, p.out
    assert "NOPERM" in p.out, p.out
    assert {k: psserver.digest(c, k) for k in c.keys("*")} == digests


def test_worker_role_allows_pull_and_push_but_refuses_everything_else(job_server):
    c = job_server.client()
    key = "%s:b1:0" % JOB                 # the 10-element output bias
    n = 10
    assert c.execute_command("PS.SNAPSHOT", key, "keep") in (b"OK", "OK")
    digests_before = None
    with psserver.RawClient(job_server.port) as u:
        assert u.call("AUTH", "w", "pw") == "OK"
        v0 = u.call("PS.PULL", key)[0]
        assert u.call("PS.PUSHGRAD", key, f32(np.zeros(n))) == v0 + 1
        digests_before = {k: psserver.digest(c, k) for k in c.keys("*")}
        refused = [
            ["PS.CREATE", "%s:new" % JOB, "SHAPE", 4],
            ["PS.SET", key, f32(np.zeros(n))],
            ["PS.CONFIG", key, "LR", "10"],
            ["PS.SNAPSHOT", key, "mine"],
            ["PS.ROLLBACK", key, "keep"],
            ["PS.DROPSNAPSHOT", key, "keep"],
            ["PS.SNAPSHOTS", key],
            ["PS.INFO", key],
            ["PS._RESTORE", key, "HEADER", b"x"],
            ["PS._CLOSEROUND", key, 1],
            ["DEL", key],
            ["UNLINK", key],
            ["RENAME", key, "%s:x" % JOB],
            ["COPY", key, "%s:x" % JOB],
            ["DUMP", key],
            ["RESTORE", "%s:x" % JOB, 0, b"x"],
            ["EXPIRE", key, 1],
            ["PS.PULL", "other:b1:0"],
            ["PS.PUSHGRAD", "other:b1:0", f32(np.zeros(n))],
            ["XADD", "psjob:{%s}:tasks" % JOB, "*", "epoch", 9],
            ["XGROUP", "DESTROY", "psjob:{%s}:tasks" % JOB, "workers"],
            ["HSET", "psjob:{other}:progress", "acked", 99],
            ["DEL", "psjob:{%s}:config" % JOB],
            ["FLUSHALL"],
            ["CONFIG", "SET", "ps.max-tensor-bytes", 1 << 40],
            ["KEYS", "*"],
            ["DEBUG", "RELOAD"],
            ["SAVE"],
            ["ACL", "SETUSER", "w", "+@all"],
            ["MODULE", "LIST"],
            ["EVAL", "return 1", 0],
        ]
        for args in refused:
            rep = u.call(*args)
            assert isinstance(rep, psserver.RespError) and rep.code == "NOPERM", (args[:3], rep)
    assert {k: psserver.digest(c, k) for k in c.keys("*")} == digests_before
    assert [s[0] for s in c.execute_command("PS.SNAPSHOTS", key)] == [b"keep"]


def sparse_worker_role(job):
    """The documented role of a sparse (--model) job's worker: the dense role plus PFADD
    (each worker reports the ids it saw into psjob:{J}:ids, a HyperLogLog). The table shards
    are <job>:emb:<s>, already under ~<job>:*; table pulls and pushes are PS.PULL/PS.PUSHGRAD."""
    return worker_role(job) + ["+pfadd"]


def test_sparse_worker_trains_under_the_documented_sparse_role(server, tmp_path):
    require_ps_train()
    prefix = str(tmp_path / "ctr")
    run_gen_ctr(["--out", prefix, "--samples", 3000, "--test-samples", 300,
                  "--fields", 4, "--vocab", 20, "--seed", 2])
    p = run(["init", "--addr", server.addr, "--job", "sp", "--model", "fm", "--train",
             prefix + ".train.libsvm", "--test", prefix + ".test.libsvm", "--task-bytes",
             20000, "--epochs", 1, "--table-shards", 2])
    assert p.returncode == 0, p.out
    c = server.client()
    assert c.execute_command("ACL", "SETUSER", "ws", "on", ">pw", *sparse_worker_role("sp"))
    c.execute_command("ACL", "LOG", "RESET")
    p = run(["work", "--addr", server.addr, "--job", "sp", "--user", "ws", "--password", "pw",
             "--progress", "none"])
    assert p.returncode == 0, p.out
    assert "ACKED_TABLE" in p.out, p.out
    assert acl_denials(c) == [], acl_denials(c)
    assert c.pfcount("psjob:{sp}:ids") > 0
    tasks = int(c.hget("psjob:{sp}:config", "tasks"))
    assert len(c.hgetall("psjob:{sp}:done")) == tasks
    versions = model_versions(c, "sp")
    assert versions and all(v > 0 for v in versions.values()), versions
    # The dense role alone (no PFADD) is refused: the sparse role is what the docs say.
    assert c.execute_command("ACL", "SETUSER", "wd", "on", ">pw", *worker_role("sp"))
    with psserver.RawClient(server.port) as u:
        assert u.call("AUTH", "wd", "pw") == "OK"
        err = u.call("PFADD", "psjob:{sp}:ids", "x")
        assert isinstance(err, psserver.RespError) and err.code == "NOPERM", err


@pytest.mark.parametrize("policy", ["block", "degrade", "fail"])
def test_worker_whose_wait_is_refused_fails_with_the_cause_under_every_policy(job_server,
                                                                              policy):
    # The documented role without +wait, and a worker asking for --wait 1: the server
    # answers every WAIT NOPERM. That is no replica count: policy block asked again at
    # once, forever (the worker hung), degrade warned of a degraded shard.
    c = job_server.client()
    p = run(["work", "--addr", job_server.addr, "--job", JOB, "--user", "w", "--password", "pw",
             "--progress", "none", "--wait", 1, "--on-degraded", policy], timeout=60)
    assert p.returncode not in (0, None) and p.returncode > 0, p.out
    assert "WAIT 1" in p.out and "refused" in p.out and "NOPERM" in p.out, p.out
    assert any(d[b"object"] == b"wait" for d in acl_denials(c)), acl_denials(c)
