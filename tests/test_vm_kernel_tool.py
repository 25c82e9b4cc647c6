"""tools/vm_kernel.py: choosing, unpacking and ordering what the test guest boots (no network: apt is
stood in for; the real fetch runs in ``scripts/setup.sh --test`` and ``python3 -m tests.vm.harness prepare``)."""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from tests.tools import load_tool

vk = load_tool("vm_kernel")

AMD64_DEPENDS = """linux-image-amd64
  Depends: linux-image-6.1.0-57-amd64
"""
FOREIGN_DEPENDS = """linux-image-arm64
  Depends: <linux-image-arm64-signed-template>
  Depends: linux-image-6.1.0-50-arm64:arm64
"""


def test_the_versioned_kernel_package_is_read_from_apt_cache_depends():
    assert vk.versioned_dependency(AMD64_DEPENDS, "linux-image-amd64") == "linux-image-6.1.0-57-amd64"
    assert vk.versioned_dependency(FOREIGN_DEPENDS, "linux-image-arm64") == "linux-image-6.1.0-50-arm64"
    with pytest.raises(vk.FetchError, match="names no linux-image package"):
        vk.versioned_dependency("linux-image-arm64\n  Depends: <linux-image-foo>\n  Recommends: firmware\n",
                                "linux-image-arm64")


def test_the_private_apt_configuration_knows_only_its_suites_and_architecture(tmp_path):
    text = vk.sources_list(("bookworm", "bookworm-updates"), "arm64", "http://m/debian", "/k.gpg")
    assert text == ("deb [arch=arm64 signed-by=/k.gpg] http://m/debian bookworm main\n"
                    "deb [arch=arm64 signed-by=/k.gpg] http://m/debian bookworm-updates main\n")
    with pytest.raises(vk.FetchError, match="at least one suite"):
        vk.sources_list((), "arm64", "http://m/debian", "/k.gpg")
    opts = vk.private_apt_options(tmp_path, "arm64")
    assert "-oAPT::Architecture=arm64" in opts and "-oAPT::Architectures::=arm64" in opts
    assert "-oDir::Etc::SourceParts=/nonexistent" in opts      # nothing of the system's /etc/apt
    paths = [o.split("=", 1)[1] for o in opts if o.startswith("-oDir::") and "nonexistent" not in o]
    assert paths and all(p.startswith(str(tmp_path)) for p in paths)


def test_only_the_named_modules_are_kept():
    mods = vk.ARCHES["arm64"].modules
    assert vk.module_wanted("./lib/modules/6.1.0-50-arm64/kernel/fs/9p/9p.ko", mods) == "9p"
    assert vk.module_wanted("usr/lib/modules/6.12.9-arm64/kernel/net/9p/9pnet.ko.xz", mods) == "9pnet"
    assert vk.module_wanted("./lib/modules/6.1.0-50-arm64/kernel/drivers/net/virtio_net.ko", mods) is None
    assert vk.module_wanted("./boot/9p.ko", mods) is None
    assert "virtio" not in mods and "virtio" in vk.ARCHES["amd64"].modules   # built into Debian's arm64 kernel
    assert vk.decompress_module("a.ko.xz", lzma.compress(b"KO")) == b"KO"
    assert vk.decompress_module("a.ko.gz", gzip.compress(b"KO")) == b"KO"
    assert vk.decompress_module("a.ko", b"KO") == b"KO"


def test_module_order_follows_modinfo_depends():
    modules = vk.ARCHES["amd64"].modules
    deps = {m: [] for m in modules}
    deps["9p"] = ["9pnet", "netfs", "fscache"]
    deps["9pnet_virtio"] = ["9pnet", "virtio", "virtio_ring"]
    deps["virtio_pci"] = ["virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio", "virtio_ring"]
    order = vk.module_order(deps, modules)
    assert sorted(order) == sorted(modules)
    for mod, needs in deps.items():
        assert all(order.index(d) < order.index(mod) for d in needs), mod
    deps["virtio"] = ["9pnet_virtio"]
    with pytest.raises(vk.FetchError, match="cycle"):
        vk.module_order(deps, modules)
    deps["virtio"] = ["not_there"]
    with pytest.raises(vk.FetchError, match="not_there"):
        vk.module_order(deps, modules)
    ko = b"\x7fELF...\x00license=GPL\x00depends=virtio,virtio_ring\x00retpoline=Y\x00"
    assert vk.modinfo_depends(ko) == ["virtio", "virtio_ring"]
    assert vk.modinfo_depends(b"\x00depends=\x00") == []
    assert vk.modinfo_depends(b"\x00depends=9pnet,crc-t10dif\x00") == ["9pnet", "crc_t10dif"]


def _arm64_image(size: int = 4096) -> bytes:
    data = bytearray(size)
    data[0x38:0x3C] = b"ARM\x64"
    return bytes(data)


def _pvh_elf(with_note: bool) -> bytes:
    """A minimal ELF64 with one PT_NOTE program header: the Xen PHYS32_ENTRY note or another one."""
    note = struct.pack("<III", 4, 4, 18 if with_note else 1) + b"Xen\x00" + b"\x00" * 4
    phoff, phentsize = 64, 56
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    struct.pack_into("<Q", header, 0x20, phoff)
    struct.pack_into("<HH", header, 0x36, phentsize, 1)
    ph = struct.pack("<IIQQQQQQ", 4, 0, phoff + phentsize, 0, 0, len(note), len(note), 4)
    return bytes(header) + ph + note


def test_the_image_to_boot_is_the_fastest_one_qemu_takes():
    image = _arm64_image()
    assert vk.extract_image("arm64", image) == ("Image", image)
    assert vk.extract_image("arm64", gzip.compress(image)) == ("Image", image)
    with pytest.raises(vk.FetchError, match="not an arm64 Image"):
        vk.extract_image("arm64", gzip.compress(b"\x00" * 4096))
    with pytest.raises(vk.FetchError, match="does not unpack"):
        vk.extract_image("arm64", b"\x1f\x8b" + b"\x00" * 100)
    elf = _pvh_elf(with_note=True)
    bzimage = b"MZ setup code" + gzip.compress(elf) + b"trailer"
    assert vk.extract_image("amd64", bzimage) == ("vmlinux", elf)
    plain = b"MZ setup code" + gzip.compress(_pvh_elf(with_note=False))
    assert vk.extract_image("amd64", plain) == ("vmlinuz", plain)    # no PVH entry: boot the bzImage
    with pytest.raises(vk.FetchError, match="unknown architecture 'mips'"):
        vk.extract_image("mips", image)


# ----------------------------------------------------------------------------- fetch, apt stood in for
def _kernel_deb(tmp_path: Path, release: str, image: bytes, modules: dict[str, bytes]) -> Path:
    """A real .deb (dpkg-deb -b) laid out as Debian's linux-image packages are."""
    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(f"Package: linux-image-{release}\nVersion: 1\nArchitecture: all\n"
                                             f"Maintainer: t <t@t>\nDescription: test kernel\n")
    (root / "boot").mkdir()
    (root / "boot" / f"vmlinuz-{release}").write_bytes(image)
    for name, ko in modules.items():
        d = root / "lib" / "modules" / release / "kernel" / "fs" / name
        d.mkdir(parents=True)
        (d / f"{name}.ko.xz").write_bytes(lzma.compress(ko))
    deb = tmp_path / f"linux-image-{release}_1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(root), str(deb)], check=True,
                   capture_output=True)
    return deb


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb to build and read a .deb")
def test_fetch_keeps_the_image_the_modules_in_order_and_a_manifest(tmp_path, monkeypatch):
    release = "6.1.0-50-arm64"
    modules = {"netfs": b"\x00depends=\x00", "fscache": b"\x00depends=netfs\x00",
               "9pnet": b"\x00depends=\x00", "9pnet_virtio": b"\x00depends=9pnet\x00",
               "9p": b"\x00depends=9pnet,netfs,fscache\x00", "unwanted": b"\x00depends=\x00"}
    deb = _kernel_deb(tmp_path, release, gzip.compress(_arm64_image()), modules)
    calls: list[list[str]] = []

    def fake_run(argv, progress=None, **kw):
        calls.append(list(argv))
        if argv[0] == "apt-cache":
            return subprocess.CompletedProcess(argv, 0, FOREIGN_DEPENDS)
        assert argv[0] == "apt-get" and argv[-2:] == ["download", f"linux-image-{release}"], argv
        shutil.copy(deb, kw["cwd"])
        return subprocess.CompletedProcess(argv, 0, "")

    monkeypatch.setattr(vk, "run", fake_run)
    monkeypatch.setattr(vk, "host_arch", lambda: "amd64")
    monkeypatch.setattr(vk, "private_apt", lambda root, suites, arch, progress=None: [f"-oAPT::Architecture={arch}"])
    keep = ("9p", "9pnet_virtio", "9pnet", "fscache", "netfs")
    dest = tmp_path / "cache" / "kernel-arm64"
    man = vk.fetch(dest, "arm64", modules=keep, release_prefix="6.1.", extra={"kernel": "arm64"})
    assert man["image"] == "Image" and man["release"] == release and man["arch"] == "arm64"
    assert man["package"] == f"linux-image-{release}" and man["kernel"] == "arm64"
    order = man["modules"]
    assert sorted(order) == sorted(keep)
    assert order.index("netfs") < order.index("fscache") < order.index("9p")
    assert order.index("9pnet") < order.index("9pnet_virtio")
    assert (dest / "Image").read_bytes() == _arm64_image()
    assert not (dest / "vmlinuz").exists() or (dest / "vmlinuz").read_bytes() != _arm64_image()
    assert sorted(p.name for p in (dest / "modules").iterdir()) == sorted(f"{m}.ko" for m in keep)
    assert (dest / "modules" / "9p.ko").read_bytes() == modules["9p"]         # decompressed
    assert json.loads((dest / "manifest.json").read_text()) == man
    assert all(c[1:2] == ["-oAPT::Architecture=arm64"] for c in calls)        # the private configuration
    # complete: no second download
    calls.clear()
    assert vk.fetch(dest, "arm64", modules=keep) == man and calls == []
    assert vk.cached_manifest(dest) == man
    (dest / "modules" / "9p.ko").unlink()
    assert vk.cached_manifest(dest) is None
    # a kernel of another series than the folder is for is refused
    with pytest.raises(vk.FetchError, match="not the 6.12.\\* this folder is for"):
        vk.fetch(tmp_path / "other", "arm64", modules=keep, release_prefix="6.12.")
    with pytest.raises(vk.FetchError, match="lacks the modules virtio_pci"):
        vk.fetch(tmp_path / "third", "arm64", modules=keep + ("virtio_pci",))


def test_the_command_line_refuses_an_unknown_architecture(capsys):
    with pytest.raises(SystemExit) as exc:
        vk.main(["fetch", "--arch", "sparc64", "/nonexistent"])
    assert exc.value.code == 2
    assert "invalid choice: 'sparc64'" in capsys.readouterr().err
