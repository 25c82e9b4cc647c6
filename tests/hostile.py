"""A second, unprivileged local user for tests: attacker code run as ``numabind-neighbour``.

``scripts/setup.sh --test`` creates the user. The tests run as root (the victim): root follows links
anywhere, which is the danger these tests look for. :func:`neighbour` skips with the reason when the
tests are not root or the user is missing, and fails instead when ``NUMABIND_REQUIRE_HOSTILE=1`` (CI).

An attack is a module-level function ``attack(chan, *args) -> dict`` run in a forked child that has
dropped to the neighbour's ids (``setgroups([])``, ``setresgid``, ``setresuid``); ``chan`` talks to the
test (one JSON value per line both ways), and the dict it returns comes back from :meth:`Attack.result`.
Attacks loop for a bounded number of iterations, never for a time. Start an attack outside
``configure_subprocess`` (its at-fork hook binds children forked inside).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest

NEIGHBOUR = "numabind-neighbour"
REQUIRE_ENV = "NUMABIND_REQUIRE_HOSTILE"


class Channel:
    """One JSON value per line over a pair of pipes."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self._r = os.fdopen(rfd, "r", encoding="utf-8")
        self._w = os.fdopen(wfd, "w", encoding="utf-8")

    def send(self, value: Any) -> None:
        self._w.write(json.dumps(value) + "\n")
        self._w.flush()

    def recv(self) -> Any:
        line = self._r.readline()
        if not line:
            raise EOFError("the other side closed the channel")
        return json.loads(line)

    def poll(self) -> bool:
        """True when a value (or the end) is waiting: never blocks."""
        return bool(select.select([self._r], [], [], 0)[0])

    def close(self) -> None:
        for f in (self._r, self._w):
            try:
                f.close()
            except OSError:
                pass


class Attack:
    """A running attack: talk to it with :meth:`send`/:meth:`recv`, then :meth:`result`."""

    def __init__(self, pid: int, chan: Channel) -> None:
        self.pid, self.chan = pid, chan
        self._result: dict[str, Any] | None = None

    def send(self, value: Any) -> None:
        self.chan.send(value)

    def recv(self) -> Any:
        return self.chan.recv()

    def result(self) -> dict[str, Any]:
        """The attack's returned dict (its traceback fails the test)."""
        if self._result is None:
            msg = self.chan.recv()
            while not (isinstance(msg, dict) and "__result__" in msg):
                msg = self.chan.recv()
            _, status = os.waitpid(self.pid, 0)
            self.chan.close()
            if "error" in msg:
                pytest.fail(f"the neighbour's attack raised:\n{msg['error']}")
            assert os.waitstatus_to_exitcode(status) == 0
            self._result = msg["__result__"]
        return self._result


class Neighbour:
    """The unprivileged user ``numabind-neighbour``."""

    def __init__(self, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid

    def start(self, attack: Callable[..., dict[str, Any]], *args: Any) -> Attack:
        to_child, from_test = os.pipe()
        to_test, from_child = os.pipe()
        pid = os.fork()
        if pid == 0:   # the attacker
            code = 1
            try:
                os.close(from_test)
                os.close(to_test)
                chan = Channel(to_child, from_child)
                try:
                    os.setgroups([])
                    os.setresgid(self.gid, self.gid, self.gid)
                    os.setresuid(self.uid, self.uid, self.uid)
                    assert os.getresuid() == (self.uid,) * 3 and os.getgroups() == []
                    os.umask(0o022)
                    os.chdir("/")
                    out = attack(chan, *args)
                    chan.send({"__result__": out})
                    code = 0
                except BaseException:  # noqa: BLE001 - reported to the test
                    chan.send({"__result__": None, "error": traceback.format_exc()})
            finally:
                os._exit(code)
        os.close(to_child)
        os.close(from_child)
        return Attack(pid, Channel(to_test, from_test))


def unavailable() -> str | None:
    """Why the neighbour cannot be used here, or None."""
    import pwd

    if os.geteuid() != 0:
        return "the hostile-neighbour tests need root (to act as a second local user)"
    try:
        pwd.getpwnam(NEIGHBOUR)
    except KeyError:
        return f"no user {NEIGHBOUR} (bash scripts/setup.sh --test creates it)"
    return None


@pytest.fixture
def neighbour() -> Neighbour:
    import pwd

    why = unavailable()
    if why is not None:
        if os.environ.get(REQUIRE_ENV, "") == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {why}")
        pytest.skip(why)
    pw = pwd.getpwnam(NEIGHBOUR)
    return Neighbour(pw.pw_uid, pw.pw_gid)


@pytest.fixture
def shared_dirs() -> Iterator[tuple[str, str]]:
    """Two root-owned, world-writable, sticky directories under /tmp: stand-ins for /dev/shm and /tmp
    that the neighbour reaches and may squat names in, without touching the real ones."""
    made = []
    try:
        for _ in range(2):
            d = tempfile.mkdtemp(prefix="numabind-hostile-", dir="/tmp")
            made.append(d)
            os.chmod(d, 0o1777)
        yield made[0], made[1]
    finally:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def precious(tmp_path) -> Iterator[str]:
    """A root-owned file in a root-only directory that no attack may truncate or overwrite."""
    vault = tmp_path / "vault"
    vault.mkdir(mode=0o700)
    path = vault / "precious"
    path.write_bytes(b"precious: must never change\n")
    path.chmod(0o600)
    before = path.read_bytes(), path.stat().st_ino
    yield str(path)
    assert (path.read_bytes(), path.stat().st_ino) == before, "the precious file was overwritten"
