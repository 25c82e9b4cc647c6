"""A real single-machine Slurm for the tests: munged, slurmctld and slurmd from Debian's packages.

:func:`start_slurm` writes a ``slurm.conf`` for this host (its CPU layout as
``slurmd -C`` reports it, ports that were free a moment ago, every state and
log file under one directory), starts ``munged`` with its own key and socket,
then ``slurmctld`` and ``slurmd`` in the foreground as children of the test,
and waits (bounded) until the node is idle. :meth:`Slurm.stop` ends them.

Plugins chosen to work in an unprivileged-cgroup container: ``proctrack/linuxproc``
(no cgroup), ``task/affinity`` (Slurm binds each task's CPUs with
``sched_setaffinity``, so ``--cpu-bind`` works), ``select/cons_tres`` with
``CR_Core``, no accounting. Two GPUs are declared as generic resources backed
by character devices made with ``mknod`` (Slurm requires device files), so
``srun --gpus-per-task=1`` sets a different ``CUDA_VISIBLE_DEVICES`` per task.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

#: What the tests need on PATH (Debian: apt-get install slurm-wlm munge).
PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sinfo")
NODE = "nb0"
START_TIMEOUT = 60.0


def missing_programs() -> list[str]:
    return [p for p in PROGRAMS if shutil.which(p) is None and not os.path.exists(f"/usr/sbin/{p}")]


def _program(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _hardware() -> dict[str, str]:
    """``slurmd -C``'s node line as a dict (CPUs, Boards, SocketsPerBoard, CoresPerSocket, ThreadsPerCore, RealMemory)."""
    out = subprocess.run([_program("slurmd"), "-C"], capture_output=True, text=True, timeout=30, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("NodeName="))
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


@dataclass
class Slurm:
    """A running single-node cluster; ``env`` is what srun needs (``SLURM_CONF``)."""

    root: Path
    conf: Path
    gpus: int
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def logs(self) -> str:
        parts = []
        for f in sorted((self.root / "log").glob("*")):
            text = f.read_text(errors="replace")[-3000:]
            parts.append(f"--- {f.name}\n{text}")
        return "\n".join(parts)

    def srun(self, args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([_program("srun"), *args], capture_output=True, text=True, timeout=timeout,
                              env={**env, **self.env}, cwd=str(self.root))

    def stop(self) -> None:
        """slurmd, then slurmctld, then munged (the daemons still talk through munge while shutting down)."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.procs.clear()


def _wait(what: str, ready, slurm: Slurm, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in slurm.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} while waiting for {what}\n"
                                   f"{slurm.logs()}")
        if ready():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}\n{slurm.logs()}")


def _gres_devices(root: Path, count: int) -> list[Path]:
    """Character devices for Slurm's GPU gres (the null device's numbers; nothing opens them)."""
    made = []
    for i in range(count):
        path = root / f"nvidia{i}"
        try:
            os.mknod(path, 0o600 | 0o020000, os.makedev(1, 3))
        except OSError:
            return []
        made.append(path)
    return made


def start_slurm(root: Path, gpus: int = 2) -> Slurm:
    """Write the configuration under ``root``, start munged, slurmctld and slurmd; wait until the node is idle."""
    for sub in ("munge", "state", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o711)
    key = root / "munge" / "munge.key"
    sock = root / "munge" / "munge.socket"
    subprocess.run([_program("mungekey"), "-c", "-k", str(key)], check=True, capture_output=True, timeout=30)
    hw = _hardware()
    host = socket.gethostname()
    devices = _gres_devices(root, gpus)
    gres_line = f" Gres=gpu:{len(devices)}" if devices else ""
    memory = min(int(re.sub(r"\D", "", hw.get("RealMemory", "1000")) or 1000), 1000)
    conf = root / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=numabindtest",
        f"SlurmctldHost={host}(127.0.0.1)",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={sock}",
        "CredType=cred/munge",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/affinity",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdTimeout=60",
        "SlurmctldTimeout=60",
        "GresTypes=gpu",
        f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={hw['CPUs']} Boards={hw.get('Boards', 1)} "
        f"SocketsPerBoard={hw['SocketsPerBoard']} CoresPerSocket={hw['CoresPerSocket']} "
        f"ThreadsPerCore={hw['ThreadsPerCore']} RealMemory={memory}{gres_line} State=UNKNOWN",
        f"PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
        "",
    ]))
    if devices:
        first, last = devices[0].name[-1], devices[-1].name[-1]
        (root / "gres.conf").write_text(f"NodeName={NODE} Name=gpu File={root}/nvidia[{first}-{last}]\n")
    slurm = Slurm(root=root, conf=conf, gpus=len(devices))
    env = {**os.environ, "SLURM_CONF": str(conf)}

    def start(*argv: str, log: str) -> None:
        out = open(root / "log" / log, "wb")   # noqa: SIM115  (kept open for the daemon's life)
        slurm.procs.append(subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, env=env,
                                            cwd=str(root), start_new_session=True))
        out.close()

    try:
        start(_program("munged"), "-F", "-f", f"--socket={sock}", f"--key-file={key}",
              f"--log-file={root / 'log' / 'munged.log'}", f"--pid-file={root / 'munge' / 'munged.pid'}",
              f"--seed-file={root / 'munge' / 'munged.seed'}", log="munged.out")
        _wait("munged's socket", sock.exists, slurm)
        start(_program("slurmctld"), "-D", "-f", str(conf), log="slurmctld.out")
        start(_program("slurmd"), "-D", "-N", NODE, "-f", str(conf), log="slurmd.out")

        def idle() -> bool:
            out = subprocess.run([_program("sinfo"), "-h", "-N", "-o", "%T"], capture_output=True, text=True,
                                 env=env, timeout=30)
            return out.returncode == 0 and out.stdout.strip() == "idle"

        _wait(f"node {NODE} to be idle", idle, slurm)
    except BaseException:
        slurm.stop()
        raise
    return slurm
