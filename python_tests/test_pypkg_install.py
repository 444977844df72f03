"""`pip install ./python` offline, in a fresh venv on Debian 12 (the one command python/README.md
gives: python3 -m venv --system-site-packages, then pip install), the [torch] extra satisfied
by Debian's python3-torch (1.13.0a0+gitunknown) without a download, and the package tests run
against the INSTALLED package (REDIS_PS_INSTALLED=1: pshelpers_pkg refuses the tree's copy).
The index is unreachable throughout (PIP_NO_INDEX, a dead PIP_INDEX_URL): any download fails."""

import os
import subprocess
import sys

import pytest

import psserver

# The install itself touches no server; the package tests it reruns on the installed copy
# run in the same pass anyway: check-asan leaves this file out.
pytestmark = pytest.mark.nosan

ROOT = psserver.REPO_ROOT
HERE = os.path.dirname(os.path.abspath(__file__))
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "http_proxy": "http://127.0.0.1:9",
           "https_proxy": "http://127.0.0.1:9"}


def run(cmd, cwd=None, env=None, timeout=600):
    e = dict(os.environ, **OFFLINE)
    e.pop("PYTHONPATH", None)
    e.update(env or {})
    p = subprocess.run(cmd, cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    assert p.returncode == 0, "%s failed:\n%s" % (" ".join(cmd), p.stdout[-4000:])
    return p.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("venv") / "v")
    run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", d])
    return os.path.join(d, "bin", "python")


def test_pip_install_offline_in_a_fresh_venv_then_the_tests_on_the_installed_package(venv):
    out = run([venv, "-m", "pip", "install", os.path.join(ROOT, "python")], cwd="/")
    assert "Successfully installed redis-ps-0.1.0" in out
    where = run([venv, "-c", "import redis_ps, redis_ps.tasks; print(redis_ps.__file__)"],
                cwd="/")
    assert where.strip().startswith(os.path.dirname(os.path.dirname(venv)))
    tests = ["test_pypkg_atomic.py", "test_pypkg.py", "test_pypkg_codec.py"]
    try:
        import torch  # noqa: F401
        tests.append("test_pypkg_torch_opt.py")
    except ImportError:
        pass
    out = run([venv, "-m", "pytest", "-q", "-p", "no:cacheprovider"] + tests, cwd=HERE,
              env={"REDIS_PS_INSTALLED": "1", "PS_MODULE": psserver.module_path()},
              timeout=900)
    assert " passed" in out and "failed" not in out


def test_the_torch_extra_is_satisfied_by_debians_torch(venv):
    pytest.importorskip("torch")
    out = run([venv, "-m", "pip", "install", os.path.join(ROOT, "python") + "[torch]"], cwd="/")
    assert "Successfully installed redis-ps" in out
    run([venv, "-c", "import redis_ps.torch"], cwd="/")


def test_an_sdist_and_a_wheel_build_offline(tmp_path, venv):
    run([venv, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), os.path.join(ROOT, "python")],
        cwd="/")
    whl = [f for f in os.listdir(str(tmp_path)) if f.endswith(".whl")]
    assert whl == ["redis_ps-0.1.0-py3-none-any.whl"]
    sys.path.insert(0, os.path.join(ROOT, "python", "build_backend"))
    try:
        import redis_ps_build
        sd = redis_ps_build.build_sdist(str(tmp_path))
    finally:
        sys.path.pop(0)
    run([venv, "-m", "pip", "install", "--force-reinstall", "--no-deps", str(tmp_path / sd)],
        cwd="/")
