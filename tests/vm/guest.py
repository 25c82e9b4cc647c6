"""Running a guest: :func:`run_guest` boots QEMU with a topology's NUMA nodes, runs a shell script in the
guest (chrooted into the host's root, shared read-only over 9p) and powers it off, within its time;
:func:`guest_script` writes that script for a command, refusing paths the guest cannot see."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .arm64 import arm64_binds, arm64_dir
from .image import Artifacts, cached_artifacts, problems, qemu_binary
from .specs import (ARM64_CPU, BOOT_MARKER, DEFAULT_KERNEL, GUEST_SHARE, KERNEL_CMDLINE, KERNEL_CMDLINE_ARM64,
                    REPO_ROOT, HarnessError, ProgressFn, cache_dir, kernel_spec, quiet, read_text, topology)


@dataclass
class GuestRun:
    """The outcome of one guest: timings, exit status and where its logs are."""

    topology: str
    run_dir: Path
    kernel: str = DEFAULT_KERNEL
    exit_code: int | None = None          # of the command inside; None if it never finished
    qemu_rc: int | None = None
    boot_s: float | None = None           # host wall clock, QEMU start -> guest init ready to run
    guest_uptime_at_boot: float | None = None
    total_s: float = 0.0
    failure: str | None = None            # why the run failed as a whole (no boot, timeout, QEMU error)
    argv: list[str] = field(default_factory=list)

    @property
    def console_path(self) -> Path:
        return self.run_dir / "console.log"

    def read(self, name: str) -> str:
        return read_text(self.run_dir / name)

    def console_tail(self, lines: int = 120) -> str:
        text = self.read("console.log").replace("\r", "")
        qemu = self.read("qemu.log").strip()
        tail = "\n".join(text.splitlines()[-lines:])
        out = f"--- guest console ({self.console_path}, last {lines} lines) ---\n{tail}\n"
        if qemu:
            out += f"--- qemu stderr ---\n{qemu[-4000:]}\n"
        return out

    def summary(self) -> str:
        boot = f"booted in {self.boot_s:.1f} s" if self.boot_s is not None else "did not boot"
        if self.guest_uptime_at_boot is not None:
            boot += f" (guest uptime {self.guest_uptime_at_boot:.1f} s)"
        state = self.failure or f"command exit {self.exit_code}"
        name = self.topology if self.kernel == DEFAULT_KERNEL else f"{self.topology} (kernel {self.kernel})"
        return f"{name}: {boot}, whole run {self.total_s:.1f} s, {state}"


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        raise HarnessError(f"${name} must be a number of seconds, got {os.environ[name]!r}") from None


def new_run_dir(topology_name: str) -> Path:
    runs = cache_dir() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    dated = []
    for p in runs.iterdir():
        try:
            dated.append((p.stat().st_mtime, p))
        except FileNotFoundError:  # pruned meanwhile by a concurrent session
            continue
    for _, stale in sorted(dated)[:-11]:
        shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{time.strftime('%Y%m%d-%H%M%S')}-{topology_name}-", dir=runs))


def run_guest(topology_name: str, script: str, *, run_dir: Path | None = None, artifacts: Artifacts | None = None,
              boot_timeout: float | None = None, timeout: float | None = None,
              progress: ProgressFn = quiet, kernel: str | None = None) -> GuestRun:
    """Boot a guest of ``topology_name`` with ``kernel`` (a name in :data:`KERNELS`; default
    :data:`DEFAULT_KERNEL`), run the shell ``script`` in it (chrooted into the host root,
    writable folder ``GUEST_SHARE``), power it off; never takes longer than ``timeout`` seconds.

    ``boot_timeout`` bounds QEMU start -> init ready ($NUMABIND_VM_BOOT_TIMEOUT, default 120 s; 300 s for
    arm64); ``timeout`` bounds the whole run ($NUMABIND_VM_TIMEOUT, default 600 s).
    """
    spec = topology(topology_name)
    kspec = kernel_spec(kernel)
    kernel = kspec.name
    arm64 = kspec.arch == "arm64"
    if arm64 and spec.hmat:
        raise HarnessError(f"topology {spec.name} needs ACPI HMAT, which the arm64 guest (device tree boot) "
                           f"does not have")
    arts = artifacts or cached_artifacts(kernel)
    qemu = qemu_binary(kspec.arch)
    if arts is None or qemu is None:
        raise HarnessError("the VM is not ready: " + "; ".join(problems(kernel)) +
                           " (run: python3 -m tests.vm.harness prepare)")
    boot_timeout = boot_timeout if boot_timeout is not None else _env_float("NUMABIND_VM_BOOT_TIMEOUT",
                                                                            300 if arm64 else 120)
    timeout = timeout if timeout is not None else _env_float("NUMABIND_VM_TIMEOUT", spec.timeout_s)
    run_dir = run_dir or new_run_dir(topology_name)
    (run_dir / "run.sh").write_text(script)
    if arm64:
        (run_dir / "root").write_text(f"{arm64_dir() / 'root'}\n")
        (run_dir / "binds").write_text("".join(f"{src}|{dst}\n" for src, dst in arm64_binds()))
        machine, cpu, cmdline = "virt", os.environ.get("NUMABIND_VM_CPU_ARM64") or ARM64_CPU, KERNEL_CMDLINE_ARM64
    else:
        (run_dir / "binds").write_text("".join(f"{p}\n" for p in paths_to_bind()))
        machine, cpu, cmdline = spec.machine, os.environ.get("NUMABIND_VM_CPU") or "max,l3-cache=off", KERNEL_CMDLINE
    console = run_dir / "console.log"
    argv = [qemu, "-nodefaults", "-no-user-config", "-machine", machine, "-accel", "tcg,thread=multi",
            "-cpu", cpu, *spec.qemu_args(),
            "-kernel", str(arts.kernel), "-initrd", str(arts.initramfs), "-append", cmdline,
            "-serial", f"file:{console}", "-display", "none", "-monitor", "none", "-no-reboot",
            "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
            *_results_share(run_dir, spec, arm64)]
    guard = shutil.which("timeout")
    if guard:  # a second bound that holds even if this Python process dies
        argv = [guard, "-k", "5", str(int(timeout) + 15), *argv]
    run = GuestRun(topology_name, run_dir, kernel=kernel, argv=argv)
    progress(f"booting {spec.name} with kernel {arts.release}: {spec.description}")
    start = time.monotonic()
    with open(run_dir / "qemu.log", "wb") as qlog:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=qlog, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        seen = ""
        while True:
            rc = proc.poll()
            elapsed = time.monotonic() - start
            if run.boot_s is None:
                seen = read_text(console)
                m = re.search(BOOT_MARKER + r" uptime=([0-9.]+)", seen)
                if m:
                    run.boot_s = elapsed
                    run.guest_uptime_at_boot = float(m[1])
                    progress(f"booted in {elapsed:.1f} s")
            if rc is not None:
                run.qemu_rc = rc
                break
            if run.boot_s is None and elapsed > boot_timeout:
                run.failure = f"guest did not boot within {boot_timeout:.0f} s"
                break
            if elapsed > timeout:
                run.failure = f"guest timed out after {timeout:.0f} s (booted, the command did not finish)"
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        run.total_s = time.monotonic() - start
    code = run.read("exit_code").strip()
    run.exit_code = int(code) if code.lstrip("-").isdigit() else None
    if run.failure is None:
        if run.boot_s is None:
            run.failure = f"QEMU exited with {run.qemu_rc} before the guest booted"
        elif run.exit_code is None:
            run.failure = f"QEMU exited with {run.qemu_rc} before the command finished"
    progress(run.summary())
    return run


#: Host folders the guest covers with its own mounts: files there are invisible inside,
#: except for folders under /tmp and /run that :func:`paths_to_bind` names (bound back in).
GUEST_MOUNTS = ("/tmp", "/run", "/dev", "/proc", "/sys")
REBINDABLE = ("/tmp", "/run")


def _under(path: str, mounts: Sequence[str]) -> str | None:
    for mount in mounts:
        if path == mount or path.startswith(mount + "/"):
            return mount
    return None


def paths_to_bind() -> list[str]:
    """Host folders under /tmp or /run that the guest needs: the checkout and the interpreter's prefixes
    (CI may clone the project anywhere, /tmp included)."""
    wanted = {str(REPO_ROOT), sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    out = []
    for p in sorted(os.path.abspath(w) for w in wanted):
        if _under(p, REBINDABLE) and p not in REBINDABLE and not any(p.startswith(q + "/") for q in out):
            out.append(p)
    return out


def hidden_in_guest(path: str | os.PathLike) -> str | None:
    """The guest mount that hides ``path``, or None when the guest sees it."""
    p = os.path.abspath(os.fspath(path))
    if any(p == b or p.startswith(b + "/") for b in paths_to_bind()):
        return None
    return _under(p, GUEST_MOUNTS)


def _results_share(run_dir: Path, spec: object, arm64: bool) -> list[str]:
    """QEMU's arguments for the results share. On an x86 guest with a node 1, its virtio-9p device sits behind a PCI
    expander bridge of node 1 (``pxb``, ACPI ``_PXM``), so the guest has a real PCI device with a NUMA node and
    interrupts of its own (device-locality tests: ``numabind irq --apply`` moves them onto node 1's CPUs)."""
    share = f"local,path={run_dir},mount_tag=results,security_model=none"
    nodes = getattr(spec, "nodes", ())
    if arm64 or len(nodes) < 2 or not nodes[1].cpus:
        return ["-virtfs", share]
    return ["-device", "pxb,id=node1bus,bus_nr=64,numa_node=1,bus=pci.0",
            "-fsdev", f"local,id=results,path={run_dir},security_model=none",
            "-device", "virtio-9p-pci,fsdev=results,mount_tag=results,bus=node1bus,addr=0x0"]


def guest_script(argv: Sequence[str], *, cwd: Path | str = REPO_ROOT, env: Mapping[str, str] = {}) -> str:
    """A run.sh that runs ``argv`` in ``cwd`` with the host's PATH and HOME plus ``env``."""
    for what, path in (("the working directory", cwd), ("the program", argv[0])):
        mount = hidden_in_guest(path)
        if mount:
            raise HarnessError(f"{what} {path} is under {mount}, which the guest covers with its own "
                               f"mount; use a checkout and Python outside {', '.join(GUEST_MOUNTS)}")
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "_NUMABIND_VM_SHARE": GUEST_SHARE}
    base.update(env)
    lines = ["set -u", f"cd {shlex.quote(str(cwd))} || exit 125"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in base.items()]
    lines.append("exec " + shlex.join(argv))
    return "\n".join(lines) + "\n"


