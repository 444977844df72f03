"""Tests of scripts/check_design.py (the design check `make test` runs) on small fake
source trees compiled here, so each rule is shown to catch what it is for."""

import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.nosan   # no server, no module: nothing for check-asan to check

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "scripts", "check_design.py")


def make_tree(root, files, allow=""):
    """Writes 'files' ({rel path: text}) and the real common/protocol.h, clock.h under
    'root', compiles every .c into root/build/obj, writes the allow-list."""
    os.makedirs(os.path.join(root, "common"), exist_ok=True)
    for h in ("protocol.h", "clock.h"):
        shutil.copy(os.path.join(REPO, "common", h), os.path.join(root, "common"))
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    for rel in files:
        if rel.endswith(".c"):
            obj = os.path.join(root, "build", "obj", rel[:-2] + ".o")
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-w", "-I", os.path.join(root, "common"), "-c",
                            os.path.join(root, rel), "-o", obj], check=True)
    os.makedirs(os.path.join(root, "scripts"), exist_ok=True)
    with open(os.path.join(root, "scripts", "design_allow.txt"), "w") as f:
        f.write(allow)


def run(root):
    p = subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


CLEAN = {
    "common/c.c": "int c_fn(void) { return 1; }\n",
    "libps/a.c": "int c_fn(void); int a_fn(void) { return c_fn(); }\n",
    "libps/b.c": 'int a_fn(void);\nconst char *b_cmd(void) { return "PS.INFO"; }\n'
                 "int b_fn(void) { return a_fn(); }\n",
    "relay/r.c": "int b_fn(void); int main(void) { return b_fn(); }\n",
}


def test_a_clean_tree_passes(tmp_path):
    make_tree(str(tmp_path), CLEAN)
    rc, out = run(str(tmp_path))
    assert rc == 0, out
    assert "check-design: OK" in out and "0 circle(s)" in out


def test_a_call_up_and_a_circle_across_components_fail(tmp_path):
    files = dict(CLEAN)
    files["common/c.c"] = "int a_fn(void); int c_fn(void) { return 1; }\nint up(void) { return a_fn(); }\n"
    files["module/m.c"] = "int b_fn(void); int m_fn(void) { return b_fn(); }\n"
    # A subfolder belongs to its top-level folder's component.
    files["module/core/k.c"] = "int a_fn(void); int k_fn(void) { return a_fn(); }\n"
    make_tree(str(tmp_path), files)
    rc, out = run(str(tmp_path))
    assert rc == 1, out
    assert "common/c.c calls libps/a.c (a_fn): common may call only itself" in out, out
    assert "module/m.c calls libps/b.c (b_fn): module may call only common" in out, out
    assert "module/core/k.c calls libps/a.c (a_fn): module may call only common" in out, out
    assert "call circle across components common/libps: common/c.c libps/a.c" in out, out


def test_a_circle_of_three_files_fails_unless_allowed_with_a_reason(tmp_path):
    files = dict(CLEAN)
    files["libps/x.c"] = "int y(void); int x(void) { return y(); }\n"
    files["libps/y.c"] = "int z(void); int y(void) { return z(); }\n"
    files["libps/z.c"] = "int x(void); int z(void) { return x(); }\n"
    make_tree(str(tmp_path), files)
    rc, out = run(str(tmp_path))
    assert rc == 1 and "call circle of 3 files in libps/: libps/x.c libps/y.c libps/z.c" in out, out
    assert "circle libps x.c y.c z.c -- <why it stays>" in out, out
    # Allowed (by base name, so moving the files keeps it allowed); a circle of
    # two files is never reported.
    make_tree(str(tmp_path), files, allow="circle libps w.c x.c y.c z.c -- a reason\n")
    rc, out = run(str(tmp_path))
    assert rc == 0 and "circle in libps/: x.c y.c z.c" in out, out
    files["libps/z.c"] = "int z(void) { return 0; }\n"
    files["libps/y.c"] = "int z(void); int x(void); int y(void) { return z() + x(); }\n"
    make_tree(str(tmp_path), files, allow="circle libps w.c x.c y.c z.c -- a reason\n")
    rc, out = run(str(tmp_path))
    assert rc == 0 and "0 circle(s)" in out and "matches nothing any more" in out, out


def test_encoders_includes_and_facts(tmp_path):
    files = dict(CLEAN)
    files["libps/e.c"] = ('const char *e1(void) { return "PS.TAKE"; }\n'
                          'const char *e2(void) {\n    return "PS.TAKE";\n}\n'
                          'const char *msg(int x) { return x ? "PS.TAKE %s: failed" : ""; }\n')
    files["relay/r.c"] = (
        '#include <string.h>\n#include "../libps/e.h"\n'
        "struct rep { const char *str; };\n"
        "int b_fn(void);\n"
        'int nokey(struct rep *r) { return strstr(r->str, "no such key") != 0; }\n'
        'int stale(const char *s) { return strncmp(s, "STALE", 5) == 0; }\n'
        'int field(const char *s) { return strcmp(s, "version") == 0; }\n'
        'const char *opt(void) { return "Adagrad"; } /* "sgd" in a comment is fine */\n'
        'const char *cmd(void) { return "PS.INFO %s"; }\n'
        "int main(void) { return b_fn(); }\n")
    files["libps/e.h"] = "int e1(void);\n"
    files["module/clk.c"] = '#include "clock.h"\nint m(void) { return 0; }\n'
    make_tree(str(tmp_path), files)
    rc, out = run(str(tmp_path))
    assert rc == 1, out
    assert "PS.TAKE is built in 2 libps functions: e1 (libps/e.c), e2 (libps/e.c)" in out, out
    assert "PS.INFO is built outside libps, in relay/r.c" in out, out
    assert 'relay/r.c includes "../libps/e.h"' in out, out
    assert 'relay/r.c:5 matches an error reply by its text ("no such key")' in out, out
    assert 'relay/r.c:6 matches an error reply by its text ("STALE")' in out, out
    assert "relay/r.c:7" not in out, out  # a field name, not an error text
    assert 'relay/r.c names 1 optimizers as literals (8:"Adagrad")' in out, out
    assert "module/clk.c includes clock.h" in out, out


def test_cycles_listing_and_the_trainer_layers(tmp_path):
    """--cycles (make check-cycles, once scripts/check_cycles.py) lists every cycle with the
    symbols closing it; a 2-file cycle inside a component is allowed, one between train/ and
    ml/ (ml calling up into the trainer) or tools/ and ml/ fails."""
    files = dict(CLEAN)
    files["ml/nn.c"] = "int nn_b(void); int nn_a(void) { return nn_b(); }\n"
    files["ml/opt.c"] = "int nn_a(void); int nn_b(void) { return 0; }\nint o(void) { return nn_a(); }\n"
    files["train/job.c"] = "int nn_a(void); int job(void) { return nn_a(); }\n"
    make_tree(str(tmp_path), files)
    p = subprocess.run([sys.executable, SCRIPT, "--root", str(tmp_path), "--cycles", "ml",
                        "train", "tools"], capture_output=True, text=True)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "allowed: cycle of 2 files: ml/nn.c ml/opt.c" in out, out
    assert "ml/nn.c -> ml/opt.c: nn_b" in out and "ml/opt.c -> ml/nn.c: nn_a" in out, out
    assert "check-design: 1 call cycle(s) among the files of ml, tools, train" in out, out
    # ml calls up into train, closing a cycle across components; tools calls train.
    files["ml/opt.c"] = ("int nn_a(void); int job(void); int nn_b(void) { return job(); }\n"
                         "int o(void) { return nn_a(); }\n")
    files["tools/t.c"] = "int job(void); int main(void) { return job(); }\n"
    make_tree(str(tmp_path), files)
    p = subprocess.run([sys.executable, SCRIPT, "--root", str(tmp_path), "--cycles"],
                       capture_output=True, text=True)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "FAIL: cycle of 3 files: ml/nn.c ml/opt.c train/job.c" in out, out
    assert "ml/opt.c calls train/job.c (job): ml may call only common" in out, out
    assert "call circle across components ml/train" in out, out
    assert "tools/t.c calls train/job.c (job): tools may call only common, ml" in out, out
