from setuptools import setup

# The C core is compiled by cffi (out-of-line API mode); see build_ffi.py.
setup(cffi_modules=["build_ffi.py:ffibuilder"])
