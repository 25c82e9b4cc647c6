"""hwloc's own XML test files (``tests/data/hwloc-xml``, hwloc 2.14.0's ``tests/hwloc/xml``): the archive, the
names of its files, those with GPUs, and how to unpack it (the ``corpus`` fixture in conftest.py)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

ARCHIVE = Path(__file__).parent / "data" / "hwloc-xml" / "hwloc-2.14.0-tests-xml.tar.xz"
#: tarfile's data filter where this Python has it (3.10.12, 3.11.4, 3.12 and later; Debian 12's 3.11.2 lacks it)
DATA_FILTER = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
#: PCI classes of GPUs as hwloc writes them: display controllers and processing accelerators.
GPU_CLASSES = ('pci_type="03', 'pci_type="12')


def names() -> list[str]:
    """Every XML file of the corpus, by name."""
    with tarfile.open(ARCHIVE) as tf:
        return sorted(os.path.basename(m.name) for m in tf.getmembers() if m.name.endswith(".xml"))


def gpu_files() -> list[str]:
    """The corpus files that hold a GPU (a display controller or an accelerator among their PCI devices)."""
    with tarfile.open(ARCHIVE) as tf:
        found = []
        for m in tf.getmembers():
            handle = tf.extractfile(m) if m.name.endswith(".xml") else None
            if handle is not None and any(c in handle.read().decode("utf-8", "replace") for c in GPU_CLASSES):
                found.append(Path(m.name).name)
    return sorted(found)


def unpack(dest: Path) -> Path:
    """The corpus unpacked into ``dest`` (tarfile's data filter: plain files only, nothing outside the folder)."""
    with tarfile.open(ARCHIVE) as tf:
        tf.extractall(dest, **DATA_FILTER)
    return dest
