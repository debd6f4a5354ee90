"""Builds the redmutex Python package: the C core compiled into a cffi extension.

Metadata lives in pyproject.toml, except the version and the license, which
are read here from where the whole project keeps them (CMakeLists.txt's
project() version, LICENSE's title; packaging/meta reads them the same way for
the other packages). This file also wires in the cffi build module
(python/redmutex/_build.py), which compiles core/src/*.c directly into the
extension and links the system hiredis (pkg-config, else -lhiredis).
"""

import os
import re

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
# LICENSE's title -> the SPDX name of the license (packaging/meta has the same table).
LICENSES = {"BSD 3-Clause License": "BSD-3-Clause"}


def project_version() -> str:
    with open(os.path.join(HERE, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"^project\(redmutex\s+VERSION\s+([0-9][0-9.]*)", f.read(), re.M)
    if not m:
        raise RuntimeError("no 'project(redmutex VERSION x.y.z' line in CMakeLists.txt")
    return m.group(1)


def project_license() -> str:
    with open(os.path.join(HERE, "LICENSE"), encoding="utf-8") as f:
        title = next((line.strip() for line in f if line.strip()), "")
    if title not in LICENSES:
        raise RuntimeError(f"LICENSE's title {title!r} is not in setup.py's LICENSES")
    return LICENSES[title]


setup(
    version=project_version(),
    license=project_license(),
    package_dir={"": "python"},
    packages=["redmutex"],
    package_data={"redmutex": ["py.typed", "_redmutex_cffi.pyi"]},
    cffi_modules=["python/redmutex/_build.py:ffibuilder"],
    zip_safe=False,
)
