"""A PEP 517 build backend for redis_ps that needs nothing to be installed or downloaded.

pip builds a project in an isolated environment into which it installs the backend's
requirements from the package index; setuptools as the backend therefore needs the network
(or --no-build-isolation). This backend lives in the tree (pyproject.toml: backend-path) and
requires nothing, so `pip install ./python` works offline. It writes a pure-Python wheel
(redis_ps/*.py plus the metadata of pyproject.toml's [project] table), an sdist, and an
editable wheel (a .pth file pointing at this directory) for `pip install -e`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "redis_ps"
TAG = "py3-none-any"


def _toml() -> Dict[str, Any]:
    path = os.path.join(ROOT, "pyproject.toml")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        import tomllib                  # Python 3.11+
        return tomllib.loads(raw.decode())
    except ImportError:
        pass
    try:
        import tomli                    # older Pythons with tomli installed
        return tomli.loads(raw.decode())
    except ImportError:
        pass
    # A reader for this file's subset: [tables], key = "string" | [ "list", ... ]
    out: Dict[str, Any] = {}
    cur = out
    text = raw.decode()
    for m in re.finditer(r'^\[([^\]]+)\]\s*$|^([A-Za-z0-9_."-]+)\s*=\s*(".*?"|\[.*?\])\s*$',
                         text, re.M | re.S):
        if m.group(1):
            cur = out
            for part in m.group(1).split("."):
                cur = cur.setdefault(part.strip().strip('"'), {})
        else:
            val = m.group(3)
            cur[m.group(2).strip('"')] = (re.findall(r'"(.*?)"', val) if val.startswith("[")
                                          else val[1:-1])
    return out


def _project() -> Dict[str, Any]:
    return _toml()["project"]


def _dist_name(p: Dict[str, Any]) -> str:
    return re.sub(r"[-_.]+", "_", p["name"]).lower()


def _metadata(p: Dict[str, Any]) -> bytes:
    lines = ["Metadata-Version: 2.1", "Name: %s" % p["name"], "Version: %s" % p["version"]]
    if p.get("description"):
        lines.append("Summary: %s" % p["description"])
    if p.get("requires-python"):
        lines.append("Requires-Python: %s" % p["requires-python"])
    for d in p.get("dependencies", []):
        lines.append("Requires-Dist: %s" % d)
    for extra, deps in p.get("optional-dependencies", {}).items():
        lines.append("Provides-Extra: %s" % extra)
        for d in deps:
            lines.append('Requires-Dist: %s ; extra == "%s"' % (d, extra))
    body = ""
    readme = p.get("readme")
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode()


def _sources() -> List[str]:
    pkg = os.path.join(ROOT, PACKAGE)
    return sorted(os.path.join(PACKAGE, f) for f in os.listdir(pkg) if f.endswith(".py"))


def _dist_info_files(p: Dict[str, Any]) -> Dict[str, bytes]:
    return {"METADATA": _metadata(p),
            "WHEEL": ("Wheel-Version: 1.0\nGenerator: redis_ps_build\nRoot-Is-Purelib: true\n"
                      "Tag: %s\n" % TAG).encode(),
            "top_level.txt": (PACKAGE + "\n").encode()}


def _write_wheel(directory: str, files: Dict[str, bytes]) -> str:
    p = _project()
    name = "%s-%s" % (_dist_name(p), p["version"])
    info = name + ".dist-info"
    entries = dict(files)
    for k, v in _dist_info_files(p).items():
        entries["%s/%s" % (info, k)] = v
    record = []
    for path, data in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record.append("%s/RECORD,," % info)
    entries["%s/RECORD" % info] = ("\n".join(record) + "\n").encode()
    fname = "%s-%s.whl" % (name, TAG)
    with zipfile.ZipFile(os.path.join(directory, fname), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in entries.items():
            zi = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data, zipfile.ZIP_DEFLATED)
    return fname


# ---- PEP 517 / PEP 660 hooks ------------------------------------------------------

def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None
                                    ) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Dict[str, Any]] = None) -> str:
    p = _project()
    info = "%s-%s.dist-info" % (_dist_name(p), p["version"])
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for k, v in _dist_info_files(p).items():
        with open(os.path.join(metadata_directory, info, k), "wb") as f:
            f.write(v)
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    files = {}
    for rel in _sources():
        with open(os.path.join(ROOT, rel), "rb") as f:
            files[rel.replace(os.sep, "/")] = f.read()
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, {"%s.pth" % PACKAGE: (ROOT + "\n").encode()})


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    p = _project()
    base = "%s-%s" % (_dist_name(p), p["version"])
    fname = base + ".tar.gz"
    rels = ["pyproject.toml", "README.md", os.path.join("build_backend", "redis_ps_build.py")]
    rels += _sources()
    with tarfile.open(os.path.join(sdist_directory, fname), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel in rels:
            t.add(os.path.join(ROOT, rel), arcname="%s/%s" % (base, rel.replace(os.sep, "/")))
        pkg_info = _metadata(p)
        ti = tarfile.TarInfo("%s/PKG-INFO" % base)
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return fname
