#!/usr/bin/env bash
# arm64 builds of Python packages with compiled code, at the host interpreter's versions, for the arm64 runs
# (tests/vm's arm64 guest, scripts/arm64_unit.sh): each as its arm64 wheel (pip download, nothing installed),
# unpacked into SITE, which those runs put before the host's packages on PYTHONPATH (the host's copies carry
# x86 extension modules; psutil's is an abi3 one, which an arm64 interpreter would try to load).
#   bash scripts/arm64_wheels.sh SITE PACKAGE...     # PYTHON names the host interpreter (default python3)
# Idempotent: a package whose dist-info of the host's version is in SITE is left as it is.
set -euo pipefail
PY=${PYTHON:-python3}
site=${1:?usage: arm64_wheels.sh SITE PACKAGE...}
shift
mkdir -p "$site"
for pkg in "$@"; do
    ver=$("$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$pkg")
    [ -d "$site/$pkg-$ver.dist-info" ] && continue
    wheels=$(mktemp -d)
    "$PY" -m pip download -q --no-deps --only-binary=:all: --implementation cp --python-version 3.11 \
        --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 -d "$wheels" "$pkg==$ver"
    rm -rf "${site:?}/$pkg" "$site/$pkg"-*.dist-info
    "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
        "$site" "$wheels"/*.whl
    rm -rf "$wheels"
done
