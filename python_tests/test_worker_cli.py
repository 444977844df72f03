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
from faultlib import PS_TRAIN, ps_train  # noqa: F401 (ps_train is a fixture)
from pshelpers import run_gen_ctr, run_ps_train


def run(args, timeout=120, check=True, env_extra=None):
    """Runs ps-train with 'args' (our environment plus 'env_extra'); returns the
    CompletedProcess with .out (stdout+stderr)."""
    env = dict(os.environ)
    env.update(env_extra or {})
    return run_ps_train(args, timeout=timeout, check=check, env=env)


def popen(args, env_extra=None, new_session=False):
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.Popen([PS_TRAIN] + [str(a) for a in args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=new_session)


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
         "--task-samples", 500, "--batch", 32])
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
    pushes = moved = 0
    for tr in traces:
        last_pull = None
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
    assert moved > 10            # the versions did move between pulls: the check had work
    assert pushes == 8 * 16, pushes          # 8 shards of 500 in batches of 32


# ---------------------------------------------------------------------------
# Reusing a job name
# ---------------------------------------------------------------------------

def test_reused_job_name_with_other_settings_is_an_error_naming_them(ps_train, server):
    r = server.client()
    base = ["init", "--addr", server.addr, "--job", "re", "--limit", 2000, "--task-samples", 1000,
            "--layers", "784,16,10"]
    run(base)
    p = run(base + ["--layers", "784,32,10", "--epochs", 3, "--optim", "adam"], check=False)
    assert p.returncode == 2, p.out
    for needle in ("--layers 784,32,10 (job: 784,16,10)", "--epochs 3 (job: 1)",
                   "--optim adam (job: SGD)", "--reset", "another --job"):
        assert needle in p.out, p.out
    assert r.xlen("psjob:{re}:tasks") == 2                    # the job is unchanged
    # The same settings (and flags left out) continue the job.
    p = run(["init", "--addr", server.addr, "--job", "re", "--layers", "784,16,10"])
    assert "continuing it" in p.out, p.out
    # run checks the same way before starting any worker.
    p = run(["run", "--addr", server.addr, "--job", "re", "--layers", "784,64,10"], check=False)
    assert p.returncode == 2 and "--layers 784,64,10 (job: 784,16,10)" in p.out, p.out
    assert "starting" not in p.out


def test_rerun_of_a_finished_job_says_it_is_finished_and_exits_3(ps_train, server):
    args = ["run", "--addr", server.addr, "--job", "fin", "--limit", 1000, "--task-samples", 500,
            "--layers", "784,16,10", "--workers", 1, "--progress", "none"]
    run(args)
    p = run(args, check=False)
    assert p.returncode == 3, p.out
    assert "job fin is finished: all 2 tasks were trained" in p.out, p.out
    assert "ps-train eval" in p.out and "--reset" in p.out, p.out
    assert "starting" not in p.out


# ---------------------------------------------------------------------------
# CSV inputs checked before the first step
# ---------------------------------------------------------------------------

def write_csv(path, rows, width, classes):
    with open(path, "w") as f:
        for i in range(rows):
            f.write(",".join(["%.2f" % ((i * 7 + j) % 10 / 10.0) for j in range(width)] +
                             [str(i % classes)]) + "\n")
    return str(path)


@pytest.mark.parametrize("case", ["no-test-csv", "test-missing", "test-narrow", "test-labels"])
def test_run_csv_checks_every_input_before_training(ps_train, server, tmp_path, case):
    r = server.client()
    train = write_csv(tmp_path / "train.csv", 200, 8, 3)
    tests = {"no-test-csv": None, "test-missing": str(tmp_path / "nope.csv"),
             "test-narrow": write_csv(tmp_path / "narrow.csv", 20, 6, 3),
             "test-labels": write_csv(tmp_path / "labels.csv", 20, 8, 5)}
    args = ["run", "--addr", server.addr, "--job", "csv", "--csv", train, "--layers", "8,4,3",
            "--task-samples", 50, "--workers", 1, "--progress", "line"]
    if tests[case]:
        args += ["--test-csv", tests[case]]
    p = run(args, check=False)
    assert p.returncode in (1, 2), p.out
    needle = {"no-test-csv": "--csv needs --test-csv",
              "test-missing": "nope.csv",
              "test-narrow": "has 6 features but the model's input width is 8",
              "test-labels": "labels up to 4 but the model's output width is 3"}[case]
    assert needle in p.out, p.out
    # Nothing trained, nothing left behind: no worker started, no job keys.
    assert "starting" not in p.out and "samples/s" not in p.out, p.out
    assert r.keys("*csv*") == []


# ---------------------------------------------------------------------------
# A server without the module
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("cmd", ["init", "run", "work", "status"])
def test_server_without_the_module_is_named_at_connect_and_left_untouched(ps_train, make_server,
                                                                          cmd):
    bare = make_server(module=None)
    p = run([cmd, "--addr", bare.addr, "--job", "nm", "--limit", 1000], check=False) \
        if cmd in ("init", "run") else run([cmd, "--addr", bare.addr, "--job", "nm"], check=False)
    assert p.returncode == 1, p.out
    assert "does not have the ps module loaded" in p.out, p.out
    assert "--loadmodule" in p.out and "build/ps.so" in p.out, p.out
    assert "unknown command" not in p.out and "has no tensors" not in p.out, p.out
    assert bare.client().keys("*") == []                      # no half-made job


# ---------------------------------------------------------------------------
# Ctrl-C and resume
# ---------------------------------------------------------------------------

def acked(r, job):
    return len(r.hkeys("psjob:{%s}:done" % job))


# "group": Ctrl-C in a terminal signals run and its workers at once (and run forwards it:
# each worker gets it twice); "run": only run's pid is signalled and it forwards it.
@pytest.mark.serial   # signal timing: a starved worker holds no task (flaked beside other tests)
@pytest.mark.parametrize("target", ["run", "group"])
def test_ctrl_c_says_interrupted_and_resumable_exits_130_and_resume_is_prompt(ps_train, server,
                                                                              target):
    r = server.client()
    # 12 tasks of 1000 samples; the default --lease-ms 30000 is what a resume used to wait.
    args = ["run", "--addr", server.addr, "--job", "cc", "--limit", 12000, "--task-samples", 1000,
            "--layers", "784,64,10", "--workers", 2, "--progress", "none", "--batch", 16]
    t0 = time.monotonic()
    p = popen(args, new_session=True)
    psserver.wait_until(lambda: acked(r, "cc") >= 3, timeout=60, interval=0.01,
                        what="3 tasks acked")
    t_first = time.monotonic() - t0
    n_first = acked(r, "cc")
    if target == "group":
        os.killpg(p.pid, signal.SIGINT)
    else:
        p.send_signal(signal.SIGINT)
    out = p.communicate(timeout=60)[0].decode(errors="replace")
    assert p.returncode == 130, out
    assert out.count("stays pending") + out.count("its tasks back") == 2, out
    assert "interrupted" in out and "resumable" in out, out
    assert "rerun the same command" in out and "every worker failed" not in out, out
    pend = r.xpending("psjob:{cc}:tasks", "workers")["pending"]
    assert pend >= 1, out                       # the workers left their tasks pending
    remaining = 12 - acked(r, "cc")
    # Resume: the same command finishes the rest; the workers take their own pending
    # tasks back at once instead of waiting 30 s for the lease.
    t1 = time.monotonic()
    p2 = run(args, timeout=120)
    resume = time.monotonic() - t1
    assert "taking back my pending task" in p2.out, p2.out
    assert acked(r, "cc") == 12 and r.xpending("psjob:{cc}:tasks", "workers")["pending"] == 0
    per_task = t_first / max(n_first, 1)        # includes start-up: an overestimate
    assert resume <= remaining * per_task + 2.0, (resume, remaining, per_task)
    assert resume < 20, resume


def test_restarted_worker_takes_back_its_own_task_and_says_what_it_waits_for(ps_train, server):
    r = server.client()
    run(["init", "--addr", server.addr, "--job", "own", "--limit", 4000, "--task-samples", 1000,
         "--layers", "784,16,10"])
    common = ["work", "--addr", server.addr, "--job", "own", "--progress", "none",
              "--batch", 8]
    a = popen(common + ["--name", "A"])
    psserver.wait_until(lambda: acked(r, "own") >= 1, timeout=60, interval=0.01,
                        what="a task acked")
    a.send_signal(signal.SIGINT)
    out = a.communicate(timeout=60)[0].decode(errors="replace")
    assert a.returncode == 130, out
    assert "stays pending" in out and "--name A" in out, out
    pend = r.xpending_range("psjob:{own}:tasks", "workers", "-", "+", 10)
    assert [e["consumer"] for e in pend] == [b"A"], pend
    held = pend[0]["message_id"].decode()
    # Another worker B arrives first: it trains the new tasks, then says it waits for A's.
    b = popen(common + ["--name", "B", "--lease-ms", 60000])
    try:
        psserver.wait_until(lambda: acked(r, "own") == 3, timeout=60, interval=0.05,
                            what="B training the free tasks")
        time.sleep(0.5)
        t0 = time.monotonic()
        a2 = run(common + ["--name", "A"], timeout=60)
        assert time.monotonic() - t0 < 10
        assert "taking back my pending task %s" % held in a2.out, a2.out
        bout = b.communicate(timeout=30)[0].decode(errors="replace")
        assert b.returncode == 0, bout
        assert "waiting for 1 pending on A (1)" in bout and "--lease-ms 60000" in bout, bout
    finally:
        if b.poll() is None:
            b.kill()
            b.wait()
    assert acked(r, "own") == 4


# ---------------------------------------------------------------------------
# Task bookkeeping survives resent commands
# ---------------------------------------------------------------------------

def test_task_bookkeeping_resent_after_a_lost_reply_counts_each_task_once(ps_train, server):
    r = server.client()
    run(["init", "--addr", server.addr, "--job", "twice", "--limit", 3000, "--task-samples", 500,
         "--layers", "784,16,10"])
    # PS_TRAIN_RESEND_ACKS sends the record and the XACK of every task twice, as libps does
    # when a reply is lost: the second XACK answers 0 and the counters are written again.
    p = run(["work", "--addr", server.addr, "--job", "twice", "--name", "A", "--progress",
             "line"], env_extra={"PS_TRAIN_RESEND_ACKS": "1"})
    assert "another worker" not in p.out, p.out
    assert "done: 6 tasks" in p.out, p.out
    done = {k.decode(): v.decode() for k, v in r.hgetall("psjob:{twice}:done").items()}
    assert len(done) == 6 and set(done.values()) == {"1"}, done
    prog = {k.decode(): v.decode() for k, v in r.hgetall("psjob:{twice}:progress").items()}
    assert prog["w:A:tasks"] == "6" and prog["w:A:samples"] == "3000", prog
    assert r.xpending("psjob:{twice}:tasks", "workers")["pending"] == 0
    st = run(["status", "--addr", server.addr, "--job", "twice"])
    assert "6 total, 6 acked, 0 pending" in st.out and "samples trained: 3000" in st.out, st.out
    # A worker restarted under the same name continues its counters (absolute values).
    run(["init", "--addr", server.addr, "--job", "twice2", "--limit", 2000, "--task-samples", 500,
         "--layers", "784,16,10"])
    run(["work", "--addr", server.addr, "--job", "twice2", "--name", "A", "--max-tasks", 1,
         "--progress", "none"])
    run(["work", "--addr", server.addr, "--job", "twice2", "--name", "A", "--progress", "none"])
    prog = {k.decode(): v.decode() for k, v in r.hgetall("psjob:{twice2}:progress").items()}
    assert prog["w:A:tasks"] == "4" and prog["w:A:samples"] == "2000", prog


# ---------------------------------------------------------------------------
# The flag table: help, defaults per model kind, deprecated spellings
# ---------------------------------------------------------------------------

def flag_table():
    """{flag: (subcommands, kinds, default)} from `ps-train help flags`."""
    out = run(["help", "flags"]).out.splitlines()
    assert out[0].split()[:4] == ["FLAG", "SUBCOMMANDS", "KINDS", "DEFAULT"], out[0]
    rows = {}
    for line in out[1:]:
        name, cmds, kinds, default = line.split(None, 3)
        cmds = ["init", "work", "eval", "run", "status", "snapshot", "stream"] if cmds == "all" \
            else cmds.split(",")
        rows[name] = (cmds, kinds.split(","), default)
    return rows


def test_help_flags_lists_every_flag_with_subcommands_kinds_and_default(ps_train):
    rows = flag_table()
    assert len(rows) > 50, rows
    assert rows["--task-samples"] == (["init", "run"], ["dense"], "1000")
    assert rows["--task-bytes"] == (["init", "run"], ["sparse"], "4194304")
    assert rows["--table-shards"] == (["init", "run"], ["sparse"], "4")
    assert rows["--optim"][2] == "sgd; sparse jobs: adagrad", rows["--optim"]
    assert rows["--lr"][2] == "0.1; sparse jobs: --table-lr's value", rows["--lr"]
    assert rows["--shard-size"][2] == "deprecated spelling of --task-samples"
    assert rows["--shards"][2] == "deprecated spelling of --table-shards"
    # Each subcommand's --help lists exactly the flags the table gives it, in the group of
    # their kind, with their default.
    for cmd in ["init", "work", "eval", "run", "status", "snapshot", "stream"]:
        text = run([cmd, "--help"]).out
        groups = re.split(r"^(flags|dense jobs.*|sparse jobs.*):$", text, flags=re.M)
        listed = {}
        for title, body in zip(groups[1::2], groups[2::2]):
            kind = "dense,sparse" if title == "flags" else title.split()[0]
            for m in re.finditer(r"^  (--[a-z0-9-]+)", body, re.M):
                listed[m.group(1)] = kind
        for name, (cmds, kinds, default) in rows.items():
            if default.startswith("deprecated"):
                assert (name in text) == (cmd in cmds), (cmd, name, text)
                continue
            assert (name in listed) == (cmd in cmds), (cmd, name, text)
            if name in listed:
                assert listed[name] == ",".join(kinds), (cmd, name, listed[name])
    init = run(["init", "--help"]).out
    assert re.search(r"--optim NAME .*\[default sgd;\s+sparse jobs: adagrad\]", init, re.S), init
    assert re.search(r"--batch B .*\[default 64, sparse 256;", init, re.S), init
    assert "--table-lr X" in init and "[default 0.05]" in init, init


def test_deprecated_spellings_work_with_a_note_and_name_the_new_flag(ps_train, server):
    r = server.client()
    p = run(["init", "--addr", server.addr, "--job", "old", "--limit", 2000, "--shard-size", 500,
             "--layers", "784,16,10"])
    assert "--shard-size is deprecated, use --task-samples" in p.out, p.out
    assert r.hget("psjob:{old}:config", "shard_size") == b"500"
    assert r.xlen("psjob:{old}:tasks") == 4
    # The old and the new spelling are one flag: a rerun with either compares the same setting
    # (and names it by its new name).
    p = run(["init", "--addr", server.addr, "--job", "old", "--task-samples", 500,
             "--layers", "784,16,10"])
    assert "continuing it" in p.out and "deprecated" not in p.out, p.out
    p = run(["init", "--addr", server.addr, "--job", "old", "--shard-size", 1000], check=False)
    assert p.returncode == 2 and "--task-samples 1000 (job: 500)" in p.out, p.out


def test_sparse_defaults_come_from_the_table_and_show_in_status(ps_train, server, tmp_path):
    prefix = str(tmp_path / "ctr")
    run_gen_ctr(["--out", prefix, "--samples", 2000, "--vocab", 50, "--fields", 4])
    r = server.client()
    sparse = ["--model", "fm", "--train", prefix + ".train.libsvm", "--test",
              prefix + ".test.libsvm", "--table-lr", 0.2]
    p = run(["init", "--addr", server.addr, "--job", "sdef"] + sparse +
            ["--shards", 2, "--shard-bytes", 20000])
    assert "--shards is deprecated, use --table-shards" in p.out, p.out
    assert "--shard-bytes is deprecated, use --task-bytes" in p.out, p.out
    cfg = {k.decode(): v.decode() for k, v in r.hgetall("psjob:{sdef}:config").items()}
    # A sparse job's defaults (opts.c): Adagrad at the table's rate, batch 256.
    assert (cfg["optim"], float(cfg["lr"]), cfg["batch"]) == ("ADAGRAD", 0.2, "256"), cfg
    assert (cfg["shards"], cfg["shard_bytes"], cfg["dim"]) == ("2", "20000", "4"), cfg
    st = run(["status", "--addr", server.addr, "--job", "sdef"]).out
    assert "sparse model fm, dense tensors optim ADAGRAD lr 0.2, batch 256" in st, st
    assert re.search(r"sparse settings: --dim 4 --fields 26 .*--table-shards 2 --task-bytes "
                     r"20000 .*--init-std 0\.1 .*--optim ADAGRAD --lr 0\.2 --batch 256", st), st
    # Given values win over the sparse defaults; a dense job keeps the dense ones.
    run(["init", "--addr", server.addr, "--job", "sdef2", "--optim", "sgd", "--lr", 0.01,
         "--batch", 32] + sparse)
    cfg = r.hgetall("psjob:{sdef2}:config")
    assert (cfg[b"optim"], float(cfg[b"lr"]), cfg[b"batch"]) == (b"SGD", 0.01, b"32"), cfg
    run(["init", "--addr", server.addr, "--job", "ddef", "--limit", 1000])
    cfg = r.hgetall("psjob:{ddef}:config")
    assert (cfg[b"optim"], float(cfg[b"lr"]), cfg[b"batch"]) == (b"SGD", 0.1, b"64"), cfg
    st = run(["status", "--addr", server.addr, "--job", "ddef"]).out
    assert "optim SGD lr 0.1, batch 64" in st, st


@pytest.mark.parametrize("args,needle", [
    (["--table-shards", 2], "--table-shards is for sparse jobs: add --model"),
    (["--shards", 2], "--table-shards is for sparse jobs: add --model"),
    (["--test", "x"], "--test is for sparse jobs (--model)"),
    (["--model", "fm", "--train", "x", "--layers", "4,2"], "--layers is for dense jobs"),
    (["--model", "fm", "--train", "x", "--task-samples", 5], "--task-samples is for dense jobs"),
])
def test_a_flag_of_the_other_model_kind_is_refused(args, needle):
    p = run(["init", "--addr", "127.0.0.1:1", "--job", "k"] + args, check=False)
    assert p.returncode == 2 and needle in p.out, p.out


def test_run_result_checks_are_not_job_settings(ps_train):
    # --min-auc without --model reruns an existing sparse job (no settings given): it passes
    # the command line and fails only at connect here.
    for extra in (["--min-auc", 0.5],
                  ["--min-acc", 0.5, "--model", "fm", "--train", "x", "--test", "y"]):
        p = run(["run", "--addr", "127.0.0.1:1", "--job", "k"] + extra, check=False)
        assert p.returncode == 1 and "cannot connect" in p.out, (extra, p.out)


def test_gen_ctr_subcommand_runs_ps_gen_ctr_with_a_note(ps_train, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    new = run_gen_ctr(["--out", a, "--samples", 300, "--vocab", 20, "--seed", 5])
    old = run(["gen-ctr", "--out", b, "--samples", 300, "--vocab", 20, "--seed", 5])
    assert "'ps-train gen-ctr' is deprecated; run ps-gen-ctr" in old.out, old.out
    assert "TRUTH" in old.out and "TRUTH" in new.out
    for ext in (".train.libsvm", ".test.libsvm", ".truth"):
        with open(a + ext, "rb") as fa, open(b + ext, "rb") as fb:
            assert fa.read() == fb.read(), ext
    bad = run(["gen-ctr", "--bogus", 1], check=False)
    assert bad.returncode == 2 and "ps-gen-ctr: unknown option --bogus" in bad.out, bad.out
