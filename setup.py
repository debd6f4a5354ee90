"""Builds the redmutex Python package: the C core compiled into a cffi extension.

Metadata lives in pyproject.toml; this file only wires in the cffi build
module (python/redmutex/_build.py), which compiles core/src/*.c directly
into the extension and links the system hiredis (pkg-config, else -lhiredis).
"""

from setuptools import setup

setup(
    package_dir={"": "python"},
    packages=["redmutex"],
    package_data={"redmutex": ["py.typed", "_redmutex_cffi.pyi"]},
    cffi_modules=["python/redmutex/_build.py:ffibuilder"],
    zip_safe=False,
)
