#!/usr/bin/env bash
# Build a release into ./dist: the sdist, then from that sdist one abi3 wheel per Linux architecture
# (manylinux and musllinux, x86_64 and aarch64), each repaired by auditwheel, audited by abi3audit and tested
# on every CPython from 3.10 on by cibuildwheel (configuration: [tool.cibuildwheel] in pyproject.toml).
#   bash scripts/release.sh                 # everything (needs docker, and QEMU binfmt for aarch64 on x86_64)
#   bash scripts/release.sh --archs native  # only this machine's architecture
# Extra arguments go to cibuildwheel. Upload afterwards with: python -m twine upload dist/*
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

rm -rf dist
"$PYTHON" -m build --sdist --outdir dist .
sdist=$(ls dist/numabind-*.tar.gz)
# Building the wheels from the sdist proves the sdist is complete.
"$PYTHON" -m cibuildwheel --platform linux --output-dir dist "$@" "$sdist"
ls -l dist
