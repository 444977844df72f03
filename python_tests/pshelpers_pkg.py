"""The redis_ps the package tests import: the source tree's python/ (default) or, with
REDIS_PS_INSTALLED=1, the installed package (test_pypkg_install.py runs the package tests
that way in a fresh venv), refusing to silently fall back to the other one."""

import os
import sys

import psserver

TREE = os.path.join(psserver.REPO_ROOT, "python")
INSTALLED = os.environ.get("REDIS_PS_INSTALLED") == "1"
if not INSTALLED and TREE not in sys.path:
    sys.path.insert(0, TREE)

import redis_ps  # noqa: E402

if INSTALLED:
    assert not os.path.abspath(redis_ps.__file__).startswith(TREE + os.sep), \
        "REDIS_PS_INSTALLED=1 but redis_ps comes from the tree: %s" % redis_ps.__file__
else:
    assert os.path.abspath(redis_ps.__file__).startswith(TREE + os.sep), redis_ps.__file__
