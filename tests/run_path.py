"""The start-up paths: the modules numabind's start-up idioms pay for, measured in a fresh interpreter.

``numabind run``'s fast path, a bind and the looks keep ``dataclasses``, ``typing``, ``logging`` and ``re`` off their
imports (STYLE.md "Speed where it pays", issue 43), so the modules they load may keep the start-up idioms:
``TYPE_CHECKING = False``, :class:`numabind._base.Value`, objects built without ``__init__``. Every other module is
plain Python (tests/test_layers.py lists both paths, ``RUN_PATH`` and ``LOOK_PATH``, and checks both). The run path:

* :data:`RUN_PATH_MODULES`: what ``numabind run -C CPU -m NODE -- cmd`` loads (:func:`run_modules`; tests/test_cli.py
  pins it); :data:`CPUSET_MODULES` too when the process's affinity leaves out an online CPU (the cpuset is read then);
* what ``bind_current`` loads, through each backend (:func:`bind_current_modules`);
* what a spawn child bound at birth in the child loads (``configure_subprocess(plan, spawn="in-child")``,
  :func:`birth_modules`): it binds while it unpickles its preparation data, before the program runs.

The look path: what a first ``numabind.discover()`` and the looks' plain forms (``numabind hardware``, ``numabind
topology [--of xml]``, numactl's ``-H``) load (:func:`look_modules`), start-up measured commands guarded at 2.0x
``python -c pass`` (``python bench/bench_look.py``, P9). ``numabind move`` (issue 28, P8: :func:`move_modules`) is
on neither: it is plain Python, and its tests measure what it loads to keep heavy modules off it.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

from tests.kernel import MEM_NODE, ROOT, child_env

__all__ = ["CPUSET_MODULES", "LOOK_FORMS", "RUN_PATH_MODULES", "birth_modules", "bind_current_modules", "gpu_box",
           "loaded_by", "look_modules", "move_modules", "run_modules"]

#: What ``numabind run``'s fast path loads besides what ``python -c pass`` has: the modules a bind needs
#: and nothing of argparse, logging, typing, ``__future__`` or discovery. Each module more costs about
#: 1 % of the path's start (``python -m bench``, P7), so a new one here is a decision, not an accident.
RUN_PATH_MODULES = {"numabind", "numabind._version", "numabind.cli", "numabind._base", "numabind.errors",
                    "numabind.cpulist", "numabind._numactl", "numabind.plan", "numabind.live", "numabind._fs",
                    "numabind.backends", "numabind.backends.base", "numabind.backends.native",
                    "numabind.backends.libnuma", "numabind.bind", "numabind._native", "numabind._native.lib",
                    "_cffi_backend", "gc"}
#: Loaded by the fast path as well when the affinity leaves out an online CPU (a parent's taskset, a cpuset
#: narrower than the machine): then the cpuset is the limit a plan is checked against (issue 32), read as
#: discovery reads it. An affinity holding every online CPU means the cpuset does too, and it is not read.
CPUSET_MODULES = {"numabind._cgroup"}

_MEASURE = """
import sys
{setup}
before = set(sys.modules)
{body}
print(repr(sorted(set(sys.modules) - before)))
"""


def loaded_by(body: str, setup: str = "", **env: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``body`` that it had not after ``setup`` (by
    default: that ``python -c pass`` had not). Nothing is imported before the baseline (not even :mod:`json`,
    which would hide ``re``, ``enum``, ``functools`` and ``collections``); the list comes back as its ``repr``,
    the last line of the output."""
    cp = subprocess.run([sys.executable, "-c", _MEASURE.format(setup=setup, body=body)], capture_output=True,
                        text=True, env={**child_env(), **env}, timeout=120, cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    return set(ast.literal_eval(cp.stdout.splitlines()[-1]))


def run_modules() -> set[str]:
    """What ``numabind run -C CPU -m NODE -- true`` (its fast path: every CPU of this process's affinity, memory bound
    to a node with memory) loads up to the exec of the command, which is stood in for."""
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    body = ("import os\n"
            "class Exec(BaseException):\n    pass\n"
            "def exec_instead(path, argv, env):\n    raise Exec\n"
            "os.execvpe = exec_instead\n"
            "from numabind.cli import main\n"
            "try:\n"
            f"    main(['run', '--physcpubind={cpus}', '--membind={MEM_NODE}', '--', 'true'])\n"
            "except Exec:\n    pass\n"
            "else:\n    raise SystemExit('the fast path did not exec')\n")
    return loaded_by(body)


def bind_current_modules() -> set[str]:
    """What ``bind_current`` of a plan this process may hold (every CPU of its affinity, memory bound to a node
    with memory) loads, with the default backend, plus what choosing each other backend loads."""
    cpus = sorted(os.sched_getaffinity(0))
    body = ("import numabind\n"
            f"numabind.bind_current(numabind.Plan(cpus={cpus}, mem_policy='bind', mem_nodes={{{MEM_NODE}}}))\n"
            "from numabind.backends import BACKEND_NAMES, get_backend\n"
            "for name in BACKEND_NAMES:\n"
            "    try:\n"
            "        get_backend(name)\n"
            "    except numabind.NumabindError:\n"
            "        pass\n")
    return loaded_by(body)


def birth_modules() -> set[str]:
    """The numabind modules a spawn child bound at birth in the child has loaded when its target starts."""
    cpus = sorted(os.sched_getaffinity(0))
    code = ("import json, multiprocessing as mp, numabind\n"
            "ctx = mp.get_context('spawn')\n"
            f"plan = numabind.Plan(cpus={cpus}, mem_policy='bind', mem_nodes={{{MEM_NODE}}})\n"
            "with numabind.configure_subprocess(plan, spawn='in-child'):\n"
            "    q = ctx.Queue()\n"
            "    # exec (a builtin) as the target: unpickling it loads nothing of the child's own\n"
            "    p = ctx.Process(target=exec, args=('import sys; q.put(sorted(sys.modules))', {'q': q}))\n"
            "    p.start()\n"
            "    print(json.dumps(q.get(timeout=120)))\n"
            "    p.join(60)\n")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=180,
                        cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    return {m for m in json.loads(cp.stdout.splitlines()[-1]) if m.partition(".")[0] == "numabind"}


#: The look commands' plain forms (numabind.cli.look), each run by ``numabind.cli.main`` in one interpreter.
LOOK_FORMS = (["hardware"], ["topology"], ["topology", "--of", "xml"], ["-H"])


def look_modules(**env: str) -> set[str]:
    """What a first ``numabind.discover()`` and then the look commands' plain forms load in a fresh interpreter,
    beside what ``python -c pass`` has (``env``: e.g. ``NUMABIND_FSROOT`` for a replayed machine)."""
    body = ("import numabind\nnumabind.discover()\nfrom numabind.cli import main\n"     # the looks print before
            f"for args in {list(LOOK_FORMS)!r}:\n"                                 # the last line, loaded_by's
            "    assert main(args) == 0, args\n")
    return loaded_by(body, **env)


def gpu_box(root: str | os.PathLike) -> str:
    """A replayed two-socket machine with an NVIDIA GPU on each node, written under ``root``; returns its path."""
    from tests.fake.machines import two_sockets
    from tests.fakegpu import add_nvidia_gpu

    two_sockets(root).write()
    add_nvidia_gpu(root, "0000:18:00.0", numa_node=0, local_cpulist="0-3,8-11", minor=0)
    add_nvidia_gpu(root, "0000:9a:00.0", numa_node=1, local_cpulist="4-7,12-15", minor=1)
    return str(root)


_TARGET = ("import subprocess, sys\n"
           "target = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], stdin=subprocess.PIPE)")


def move_modules() -> set[str]:
    """What ``numabind move PID -C CPUS`` (every CPU of this process's affinity) loads in a fresh interpreter, beside
    what that interpreter had after starting the process it moves."""
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    body = ("from numabind.cli import main\n"
            f"rc = main(['move', str(target.pid), '-C', {cpus!r}])\n"
            "target.stdin.close()\ntarget.wait(60)\n"
            "assert rc == 0, rc\n")
    return loaded_by(body, setup=_TARGET)
