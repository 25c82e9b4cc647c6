"""hwloc's own XML test files (``tests/data/hwloc-xml``, hwloc 2.14.0's ``tests/hwloc/xml``): the archive, the
names of its files, those with GPUs, and how to unpack it (the ``corpus`` fixture in conftest.py); and a small
machine in hwloc's XML written here (:func:`machine_xml`), with memory attributes to add
(:data:`SYNTHETIC_MEMATTRS`)."""

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


# ----------------------------------------------------------------------------- a machine written here
HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'


def machine_xml(extra: str = "", *, infos: str = "", io: tuple[str, str] = ("", "")) -> str:
    """hwloc's own XML of ``node:2 core:2 pu:1`` (what ``lstopo --input "node:2 core:2 pu:1" --of xml`` writes:
    NUMA nodes gp_index 6 and 12, CPUs 0-1 on node 0, 2-3 on node 1), with ``extra`` elements after the root
    object, ``infos`` on the machine and ``io`` objects inside each node's group."""
    def group(k: int) -> str:
        node_gp, cpus = 6 + 6 * k, 3 << 2 * k
        cores = "".join(
            f'      <object type="Core" os_index="{c}" cpuset="0x{1 << c:08x}" complete_cpuset="0x{1 << c:08x}" '
            f'nodeset="0x{1 << k:08x}" complete_nodeset="0x{1 << k:08x}" gp_index="{node_gp - 3 + 2 * (c % 2)}">\n'
            f'        <object type="PU" os_index="{c}" cpuset="0x{1 << c:08x}" complete_cpuset="0x{1 << c:08x}" '
            f'nodeset="0x{1 << k:08x}" complete_nodeset="0x{1 << k:08x}" gp_index="{node_gp - 4 + 2 * (c % 2)}"/>\n'
            f'      </object>\n' for c in (2 * k, 2 * k + 1))
        return (f'    <object type="Group" cpuset="0x{cpus:08x}" complete_cpuset="0x{cpus:08x}" '
                f'nodeset="0x{1 << k:08x}" complete_nodeset="0x{1 << k:08x}" gp_index="{node_gp + 1}" kind="1001" subkind="0">\n'
                f'      <object type="NUMANode" os_index="{k}" cpuset="0x{cpus:08x}" complete_cpuset="0x{cpus:08x}" '
                f'nodeset="0x{1 << k:08x}" complete_nodeset="0x{1 << k:08x}" gp_index="{node_gp}" '
                f'local_memory="1073741824"/>\n' + cores + io[k] + '    </object>\n')
    return (HEAD + '<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n<topology version="2.0">\n'
            '  <object type="Machine" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f" '
            'allowed_cpuset="0x0000000f" nodeset="0x00000003" complete_nodeset="0x00000003" '
            'allowed_nodeset="0x00000003" gp_index="1">\n' + infos + group(0) + group(1) + '  </object>\n'
            + extra + '</topology>\n')


#: Memory attributes where the kernel's narrowing matters: node 0 is reached as fast from both nodes' CPUs
#: (bandwidth) but sooner from its own (latency: the kernel keeps node 0 only); node 1 from its own CPUs
#: (an object initiator: node 1 itself), with read and write figures apart. hwloc's own user attribute and a
#: value for a target that is no node are not the kernel's.
SYNTHETIC_MEMATTRS = """\
  <memattr name="Bandwidth" flags="5">
    <memattr_value target_obj_type="NUMANode" target_obj_gp_index="6" value="1000" initiator_cpuset="0x00000003"/>
    <memattr_value target_obj_type="NUMANode" target_obj_gp_index="6" value="1000" initiator_cpuset="0x0000000c"/>
    <memattr_value target_obj_type="NUMANode" target_obj_gp_index="12" value="900" initiator_cpuset="0x0000000f"/>
  </memattr>
  <memattr name="ReadBandwidth" flags="5">
    <memattr_value target_obj_type="NUMANode" target_obj_gp_index="12" value="200" initiator_cpuset="0x00000003"/>
    <memattr_value target_obj_type="NUMANode" target_obj_gp_index="12" value="400" initiator_obj_gp_index="12" initiator_obj_type="NUMANode"/>
  </memattr>
  <memattr name="WriteBandwidth" flags="5">
    <memattr_value target_obj_type="NUMANode" target_obj_gp_index="12" value="100" initiator_cpuset="0x00000003"/>
    <memattr_value target_obj_type="NUMANode" target_obj_gp_index="12" value="300" initiator_cpuset="0x0000000c"/>
  </memattr>
  <memattr name="Latency" flags="6">
    <memattr_value target_obj_type="NUMANode" target_obj_gp_index="6" value="80" initiator_cpuset="0x00000003"/>
    <memattr_value target_obj_type="NUMANode" target_obj_gp_index="6" value="120" initiator_cpuset="0x0000000c"/>
    <memattr_value target_obj_type="NUMANode" target_obj_gp_index="12" value="150" initiator_cpuset="0x0000000c"/>
  </memattr>
  <memattr name="myapp_goodness" flags="1">
    <memattr_value target_obj_type="NUMANode" target_obj_gp_index="6" value="7"/>
  </memattr>
"""
