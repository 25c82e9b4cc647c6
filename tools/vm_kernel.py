"""Fetch a Debian kernel for the multi-NUMA test guest (tests/vm) and keep only what the guest boots.

    python3 tools/vm_kernel.py fetch --arch amd64|arm64 [--suite SUITE] [--module NAME ...] [--refresh] DEST
    python3 tools/vm_kernel.py apt-options --arch arm64 APT_ROOT   # a private apt configuration, one option a line

``fetch`` asks apt which versioned package ``linux-image-<arch>`` depends on, downloads it with
``apt-get download`` (apt checks the signed index and the package's SHA256) and keeps, in DEST:

* the kernel image, as fast to boot as QEMU allows: for amd64 the uncompressed ``vmlinux`` when it
  carries a PVH entry note (it boots in half the time of the bzImage), else the bzImage
  ``vmlinuz``; for arm64 the uncompressed ``Image`` (Debian ships it gzip-compressed);
* the kernel modules the guest needs for its 9p shares (``.ko``, decompressed), in an order that
  loads each after the ones it depends on (their ``.modinfo`` ``depends=``);
* ``manifest.json``: package, release, image file, module order.

A native kernel from the system's own apt sources needs nothing more. Another suite (bookworm-backports) or
another architecture (arm64 on an amd64 host) goes through a private apt configuration under APT_ROOT (its own
sources list, package lists, archive folder and an empty dpkg status, ``APT::Architecture`` set to the wanted
one): the system's ``/etc/apt`` is never changed. ``$NUMABIND_VM_DEBIAN_MIRROR`` and
``$NUMABIND_VM_DEBIAN_KEYRING`` point it elsewhere.

Importable (``tests/vm/image.py`` loads it by path): :func:`fetch`, :func:`cached_manifest`,
:func:`private_apt`, and the pure helpers the tests check (:func:`versioned_dependency`,
:func:`module_order`, :func:`modinfo_depends`, :func:`module_wanted`, :func:`extract_image`).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

ProgressFn = Callable[[str], None]

#: The Debian mirror a private apt configuration fetches from ($NUMABIND_VM_DEBIAN_MIRROR).
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: The keyring apt checks a private configuration's signed index with ($NUMABIND_VM_DEBIAN_KEYRING).
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
#: The suite a foreign architecture's kernel and userland come from when none is named.
DEFAULT_SUITE = "bookworm"


class FetchError(RuntimeError):
    """The kernel cannot be fetched or unpacked; the message says why and what to do."""


class ArchSpec(NamedTuple):
    """What differs between the architectures a guest can have (a NamedTuple, not a dataclass: the tests load
    this file by path without registering it in sys.modules, where dataclasses look for it)."""

    name: str                       # Debian's name: amd64, arm64
    machine: str                    # uname -m in the guest
    modules: tuple[str, ...]        # what the guest loads for its 9p shares (Debian 6.1 builds them as modules)

    @property
    def meta_package(self) -> str:
        return f"linux-image-{self.name}"


ARCHES: Mapping[str, ArchSpec] = {
    a.name: a
    for a in (
        ArchSpec("amd64", "x86_64", ("virtio", "virtio_ring", "virtio_pci_modern_dev", "virtio_pci_legacy_dev",
                                     "virtio_pci", "netfs", "fscache", "9pnet", "9pnet_virtio", "9p")),
        # Debian 6.1 arm64 builds virtio and virtio_ring in; QEMU's virt board puts the 9p shares on PCI
        ArchSpec("arm64", "aarch64", ("virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci", "netfs",
                                      "fscache", "9pnet", "9pnet_virtio", "9p")),
    )
}


def arch_spec(name: str) -> ArchSpec:
    try:
        return ARCHES[name]
    except KeyError:
        raise FetchError(f"unknown architecture {name!r}; known: {', '.join(ARCHES)}") from None


def host_arch() -> str:
    """dpkg's architecture of this machine (amd64 when dpkg cannot say)."""
    try:
        out = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "amd64"
    return out.strip() or "amd64"


def _quiet(msg: str) -> None:
    return None


def run(argv: Sequence[str], progress: ProgressFn = _quiet, **kw) -> subprocess.CompletedProcess:
    """Run ``argv``; a non-zero exit raises :class:`FetchError` with the end of its output."""
    progress("$ " + shlex.join(argv))
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if proc.returncode != 0:
        raise FetchError(f"{shlex.join(argv)} exited with {proc.returncode}:\n{proc.stdout[-4000:]}")
    return proc


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ----------------------------------------------------------------------------- apt
def versioned_dependency(depends_output: str, meta: str) -> str:
    """The versioned kernel package a meta package depends on, from ``apt-cache depends META``'s output."""
    for m in re.finditer(r"^\s*Depends:\s*(linux-image-\S+)", depends_output, re.M):
        if m[1] != meta and not m[1].startswith("<"):
            return m[1].split(":", 1)[0]    # apt names a foreign one linux-image-...:arm64
    raise FetchError(f"apt-cache depends {meta} names no linux-image package:\n{depends_output}")


def sources_list(suites: Sequence[str], arch: str, mirror: str, keyring: str) -> str:
    """The private sources list: one ``deb`` line per suite, main only, for ``arch``."""
    if not suites:
        raise FetchError("a private apt configuration needs at least one suite")
    return "".join(f"deb [arch={arch} signed-by={keyring}] {mirror} {suite} main\n" for suite in suites)


def private_apt_options(root: Path, arch: str) -> list[str]:
    """apt options that make apt-get and apt-cache use only the configuration under ``root``."""
    return [f"-oDir::Etc::SourceList={root / 'sources.list'}", "-oDir::Etc::SourceParts=/nonexistent",
            f"-oDir::State::Lists={root / 'lists'}", f"-oDir::Cache={root}",
            f"-oDir::Cache::Archives={root / 'archives'}", f"-oDir::State::status={root / 'status'}",
            "-oDir::Etc::Preferences=/nonexistent", f"-oDir::Etc::PreferencesParts={root / 'preferences.d'}",
            "-oAPT::Get::List-Cleanup=0", f"-oAPT::Architecture={arch}", f"-oAPT::Architectures::={arch}"]


def private_apt(root: Path, suites: Sequence[str], arch: str, progress: ProgressFn = _quiet,
                update: bool = True) -> list[str]:
    """Write a private apt configuration under ``root`` that knows only ``suites`` of the Debian mirror for
    ``arch`` (its own sources list, package lists, archive folder and an empty dpkg status), fetch its
    package lists (``apt-get update``) and return the options that select it."""
    keyring = os.environ.get("NUMABIND_VM_DEBIAN_KEYRING") or DEBIAN_KEYRING
    if not os.path.isfile(keyring):
        raise FetchError(f"{keyring} is missing: apt cannot check the signed index of {', '.join(suites)} "
                         f"(apt package debian-archive-keyring, or set $NUMABIND_VM_DEBIAN_KEYRING)")
    mirror = os.environ.get("NUMABIND_VM_DEBIAN_MIRROR") or DEBIAN_MIRROR
    for sub in ("lists/partial", "archives/partial", "preferences.d"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for d in (root, *root.rglob("*")):   # apt-get drops privileges to _apt for downloads where it can
        if d.is_dir():
            os.chmod(d, 0o777)
    (root / "sources.list").write_text(sources_list(suites, arch, mirror, keyring))
    (root / "status").touch()
    opts = private_apt_options(root, arch)
    if update:
        run(["apt-get", *opts, "update"], progress)
    return opts


def _system_depends(meta: str, progress: ProgressFn) -> str:
    try:
        return run(["apt-cache", "depends", meta], progress).stdout
    except FetchError:  # a fresh machine without package lists
        sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
        run(sudo + ["apt-get", "update"], progress)
        return run(["apt-cache", "depends", meta], progress).stdout


# ----------------------------------------------------------------------------- modules
def module_wanted(member: str, modules: Sequence[str]) -> str | None:
    """The module name if a tar member is one of ``modules`` (a .ko, possibly .xz/.gz compressed)."""
    m = re.fullmatch(r"\.?/?(?:usr/)?lib/modules/[^/]+/kernel/.*/([^/]+)\.ko(\.xz|\.gz)?", member)
    if m and m[1] in modules:
        return m[1]
    return None


def decompress_module(name: str, data: bytes) -> bytes:
    if name.endswith(".xz"):
        return lzma.decompress(data)
    if name.endswith(".gz"):
        return zlib.decompress(data, 31)
    return data


def modinfo_depends(ko: bytes) -> list[str]:
    """The ``depends=`` field of a module's .modinfo section."""
    m = re.search(rb"(?:^|\x00)depends=([^\x00]*)\x00", ko)
    if not m or not m[1]:
        return []
    return [d.replace("-", "_") for d in m[1].decode().split(",") if d]


def module_order(deps: Mapping[str, list[str]], modules: Sequence[str]) -> list[str]:
    """``modules`` ordered so that each comes after those it depends on; a cycle or a dependency
    outside ``modules`` raises :class:`FetchError`."""
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(mod: str, chain: tuple[str, ...]) -> None:
        if state.get(mod) == 2:
            return
        if state.get(mod) == 1:
            raise FetchError(f"module dependency cycle: {' -> '.join(chain + (mod,))}")
        if mod not in deps:
            raise FetchError(f"module {chain[-1]} needs {mod}, which is not in the list of modules to keep "
                             f"({', '.join(modules)}); add it")
        state[mod] = 1
        for d in deps[mod]:
            visit(d, chain + (mod,))
        state[mod] = 2
        order.append(mod)

    for mod in modules:
        visit(mod, ())
    return order


# ----------------------------------------------------------------------------- images
def find_payload(image: bytes) -> bytes | None:
    """Decompress the kernel ELF out of an x86 bzImage (as the kernel tree's extract-vmlinux does)."""
    candidates: list[tuple[bytes, Callable[[bytes], bytes]]] = [
        (b"\xfd7zXZ\x00", lambda d: lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(d)),
        (b"\x1f\x8b\x08", lambda d: zlib.decompressobj(31).decompress(d)),
        (b"\x5d\x00\x00", lambda d: lzma.LZMADecompressor(format=lzma.FORMAT_ALONE).decompress(d)),
    ]
    for magic, fn in candidates:
        start = image.find(magic)
        while start != -1:
            try:
                out = fn(image[start:])
            except (lzma.LZMAError, zlib.error, EOFError):
                out = b""
            if out[:4] == b"\x7fELF":
                return out
            start = image.find(magic, start + 1)
    return None


def has_pvh_note(elf: bytes) -> bool:
    """True if an ELF kernel carries XEN_ELFNOTE_PHYS32_ENTRY, which QEMU needs to boot it directly."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for k in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + k * phentsize)
        if p_type != 4:  # PT_NOTE
            continue
        pos, end = p_offset, p_offset + p_filesz
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12:pos + 12 + namesz].rstrip(b"\x00")
            if name == b"Xen" and ntype == 18:
                return True
            pos += 12 + ((namesz + 3) & ~3) + ((descsz + 3) & ~3)
    return False


ARM64_MAGIC = b"ARM\x64"     # at offset 0x38 of an arm64 Image (Documentation/arch/arm64/booting.rst)


def is_arm64_image(data: bytes) -> bool:
    return data[0x38:0x3C] == ARM64_MAGIC


def extract_image(arch: str, vmlinuz: bytes) -> tuple[str, bytes]:
    """The image file name and bytes to boot, from the package's ``vmlinuz``: for amd64 the uncompressed
    PVH ``vmlinux`` when one can be found, else the bzImage; for arm64 the uncompressed ``Image``."""
    if arch == "amd64":
        elf = find_payload(vmlinuz)
        if elf is not None and has_pvh_note(elf):
            return "vmlinux", elf
        return "vmlinuz", vmlinuz
    if arch == "arm64":
        data = vmlinuz
        if data[:2] == b"\x1f\x8b":
            try:
                data = zlib.decompress(vmlinuz, 31)
            except zlib.error as exc:
                raise FetchError(f"the arm64 vmlinuz is gzip data that does not unpack: {exc}") from None
        if not is_arm64_image(data):
            raise FetchError("the arm64 vmlinuz is not an arm64 Image (no ARM\\x64 magic at 0x38), gzipped or not; "
                             "an EFI zboot image needs firmware QEMU's -kernel does not give")
        return "Image", data
    raise FetchError(f"unknown architecture {arch!r}; known: {', '.join(ARCHES)}")


# ----------------------------------------------------------------------------- fetch
def cached_manifest(dest: Path) -> dict | None:
    """DEST's manifest when the image and every module it names are there, else None."""
    man = _read_json(dest / "manifest.json")
    if not man or not isinstance(man.get("modules"), list) or not isinstance(man.get("image"), str):
        return None
    if not (dest / man["image"]).is_file():
        return None
    if not all((dest / "modules" / f"{m}.ko").is_file() for m in man["modules"]):
        return None
    return man


def fetch(dest: Path, arch: str = "amd64", *, suites: Sequence[str] = (), modules: Sequence[str] | None = None,
          release_prefix: str = "", apt_root: Path | None = None, refresh: bool = False,
          progress: ProgressFn = _quiet, extra: Mapping[str, object] | None = None) -> dict:
    """Fetch ``linux-image-<arch>``'s kernel into ``dest`` (see the module docstring) and return its manifest.

    ``suites`` empty and ``arch`` this machine's: the system's apt sources. Otherwise a private apt
    configuration under ``apt_root`` (default ``dest/../apt/<arch>-<suites>``) with ``suites`` (default
    :data:`DEFAULT_SUITE`). ``modules``: those to keep (default: the architecture's, :data:`ARCHES`).
    ``release_prefix``: the kernel release must start with it. ``extra``: more manifest fields.
    Fast when ``dest`` already holds a complete fetch, unless ``refresh``.
    """
    spec = arch_spec(arch)
    modules = tuple(modules if modules is not None else spec.modules)
    dest = Path(dest).resolve()
    man = cached_manifest(dest)
    if man and not refresh and set(man["modules"]) == set(modules) and man.get("arch", "amd64") == arch:
        progress(f"kernel {man['release']} already in {dest}")
        return man
    dest.parent.mkdir(parents=True, exist_ok=True)
    apt_opts: list[str] = []
    if suites or arch != host_arch():
        suites = tuple(suites) or (DEFAULT_SUITE,)
        root = apt_root or dest.parent / "apt" / f"{arch}-{'+'.join(suites)}"
        apt_opts = private_apt(Path(root), suites, arch, progress)
        depends = run(["apt-cache", *apt_opts, "depends", spec.meta_package], progress).stdout
    else:
        depends = _system_depends(spec.meta_package, progress)
    package = versioned_dependency(depends, spec.meta_package)
    with tempfile.TemporaryDirectory(prefix="kernel-", dir=dest.parent) as tmp:
        os.chmod(tmp, 0o777)  # apt-get download drops privileges to _apt where it can
        run(["apt-get", *apt_opts, "download", package], progress, cwd=tmp)
        debs = sorted(Path(tmp).glob("*.deb"))
        if len(debs) != 1:
            raise FetchError(f"apt-get download {package} left {[d.name for d in debs]} in {tmp}")
        progress(f"unpacking {debs[0].name}")
        vmlinuz, release, found = _unpack(debs[0], modules)
        if vmlinuz is None:
            raise FetchError(f"{debs[0].name} holds no boot/vmlinuz-*")
        if release is None or not release.startswith(release_prefix):
            raise FetchError(f"{debs[0].name} holds kernel {release}, not the {release_prefix}* this folder is for")
        absent = [m for m in modules if m not in found]
        if absent:
            raise FetchError(f"{debs[0].name} lacks the modules {', '.join(absent)} (built into this kernel? "
                             f"then leave them out of the modules to keep)")
        order = module_order({m: modinfo_depends(ko) for m, ko in found.items()}, modules)
        staging = Path(tmp) / "out"
        (staging / "modules").mkdir(parents=True)
        for mod, ko in found.items():
            (staging / "modules" / f"{mod}.ko").write_bytes(ko)
        image_name, image = extract_image(arch, vmlinuz)
        (staging / image_name).write_bytes(image)
        if image is not vmlinuz:    # keep the package's own image beside an unpacked one
            (staging / "vmlinuz").write_bytes(vmlinuz)
        progress({"vmlinux": f"uncompressed vmlinux: {len(image) >> 20} MiB (boots faster than the bzImage)",
                  "vmlinuz": "no PVH-bootable ELF could be extracted; booting the compressed bzImage",
                  "Image": f"uncompressed arm64 Image: {len(image) >> 20} MiB"}[image_name])
        man = {"package": package, "release": release, "image": image_name, "modules": order,
               "deb": debs[0].name, "arch": arch, **(extra or {})}
        (staging / "manifest.json").write_text(json.dumps(man, indent=1) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    progress(f"kernel {release} ready in {dest}")
    return man


def _unpack(deb: Path, modules: Sequence[str]) -> tuple[bytes | None, str | None, dict[str, bytes]]:
    """(vmlinuz, release, {module: .ko}) from a kernel package, streamed through ``dpkg-deb --fsys-tarfile``."""
    image = release = None
    found: dict[str, bytes] = {}
    dpkg = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    assert dpkg.stdout is not None
    with tarfile.open(fileobj=dpkg.stdout, mode="r|") as tar:
        for member in tar:
            if not member.isfile():
                continue
            base = member.name.rsplit("/", 1)[-1]
            mod = module_wanted(member.name, modules)
            if base.startswith("vmlinuz-"):
                release = base[len("vmlinuz-"):]
                image = tar.extractfile(member).read()
            elif mod is not None:
                found[mod] = decompress_module(base, tar.extractfile(member).read())
    if dpkg.wait() != 0:
        raise FetchError(f"dpkg-deb --fsys-tarfile {deb} exited with {dpkg.returncode}")
    return image, release, found


# ----------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 tools/vm_kernel.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="fetch linux-image-ARCH's kernel image and 9p modules into DEST")
    f.add_argument("--arch", default="amd64", choices=sorted(ARCHES))
    f.add_argument("--suite", action="append", default=[],
                   help="fetch from this suite of the Debian mirror (private apt configuration; repeatable)")
    f.add_argument("--module", action="append", default=None, help="a module to keep (repeatable; default: "
                   "the architecture's 9p and virtio modules)")
    f.add_argument("--release-prefix", default="", help="refuse a kernel whose release does not start with it")
    f.add_argument("--apt-root", type=Path, default=None, help="folder of the private apt configuration")
    f.add_argument("--refresh", action="store_true", help="fetch again even if DEST holds a complete fetch")
    f.add_argument("dest", type=Path)
    a = sub.add_parser("apt-options", help="write a private apt configuration, fetch its lists, print its options")
    a.add_argument("--arch", default="arm64", choices=sorted(ARCHES))
    a.add_argument("--suite", action="append", default=[])
    a.add_argument("--no-update", action="store_true", help="do not fetch the package lists")
    a.add_argument("apt_root", type=Path)
    args = ap.parse_args(argv)
    say = (lambda s: print(s, file=sys.stderr))
    try:
        if args.cmd == "fetch":
            man = fetch(args.dest, args.arch, suites=args.suite, modules=args.module,
                        release_prefix=args.release_prefix, apt_root=args.apt_root, refresh=args.refresh,
                        progress=say)
            print(json.dumps(man))
            return 0
        opts = private_apt(args.apt_root.resolve(), tuple(args.suite) or (DEFAULT_SUITE,), args.arch,
                           progress=say, update=not args.no_update)
        print("\n".join(opts))
        return 0
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
