"""Route the host projects' NUMA modules to numabind's drop-ins (``numabind instrument``, the vLLM plugin).

Python's ``site`` imports this file as ``sitecustomize`` in every interpreter whose ``PYTHONPATH`` starts with
its directory. When no other user can change what it would run (:func:`path_problem`) it puts
:class:`HostModuleFinder` first on ``sys.meta_path``, which answers an import named in :data:`ROUTES` with
numabind's drop-in (the same module object under both names), imported then from the installation this file
belongs to (:func:`package_dir`, :func:`import_own`), never from whatever ``sys.path`` finds first. Then it
runs the ``sitecustomize`` it shadows. Only the standard library is imported at start-up; nothing is written.
"""

from __future__ import annotations

import os
import stat
import sys

TYPE_CHECKING = False   # without importing typing: every process pays for this module
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["ROUTES", "HostModuleFinder", "announce", "import_own", "install", "package_dir", "package_problem",
           "path_problem"]

#: host module -> numabind's drop-in that answers its import
ROUTES = {
    "vllm.utils.numa_utils": "numabind.compat.vllm",
    "sglang.srt.utils.numa_utils": "numabind.compat.sglang",
}
#: the package whose location is checked and whose version is logged (looked up, never imported from here)
_PACKAGE = "numabind"
_announced: set[str] = set()
_said: set[str] = set()


def _say(line: str) -> None:
    """One line on stderr, once per process (logging is not configured this early)."""
    if line not in _said:
        _said.add(line)
        sys.stderr.write(f"numabind instrument: {line}\n")


def _chain_problem(path: str, uid: int) -> str | None:
    """Why another user could change what ``path`` names, walking up from it; None when none can."""
    cur = path
    below_owned = False     # the entry below ``cur`` belongs to root or the user
    while True:
        try:
            st = os.lstat(cur)
        except OSError as e:
            return f"{cur} cannot be checked ({e.strerror})"
        if st.st_uid not in (0, uid):
            return f"{cur} belongs to uid {st.st_uid}, not to root or uid {uid}"
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
            sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
            if not (sticky and below_owned):
                who = "its group and others" if st.st_mode & 0o022 == 0o022 else (
                    "its group" if st.st_mode & 0o020 else "others")
                return (f"{cur} is writable by {who} (mode {stat.S_IMODE(st.st_mode):o}): "
                        f"run chmod go-w {cur}, or install numabind where only you or root can write")
        below_owned = True
        parent = os.path.dirname(cur)
        if parent == cur:
            return None
        cur = parent


def path_problem(path: str, uid: int | None = None) -> str | None:
    """Why another user than ``uid`` (default: the effective user) or root could change what ``path`` names, or
    None. The path as given and as resolved are checked up to ``/``: each component must belong to root or the
    user and be writable by neither group nor others, except a sticky directory (``/tmp``) above an owned one."""
    uid = os.geteuid() if uid is None else uid
    for candidate in (os.path.abspath(path), os.path.realpath(path)):
        problem = _chain_problem(candidate, uid)
        if problem is not None:
            return problem
    return None


def _own_package() -> str | None:
    """This file's ``numabind`` package directory (``<it>/compat/bootstrap/sitecustomize.py``), or None."""
    here = os.path.abspath(__file__)
    package = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    if os.path.basename(package) != _PACKAGE or not os.path.isfile(os.path.join(package, "__init__.py")):
        return None
    return package


def package_dir() -> str | None:
    """The directory of the ``numabind`` package the drop-ins are imported from, or None when this interpreter
    has none: the installation this file belongs to, when its parent is on ``sys.path`` or ``numabind`` is found
    at that very place; a copy of this file outside a package takes the ``numabind`` found (not imported)."""
    from importlib.util import find_spec

    own = _own_package()
    if own is not None and any(_same_dir(entry, os.path.dirname(own)) for entry in sys.path):
        return own
    spec = find_spec(_PACKAGE)
    if spec is None or not spec.origin:
        return None
    found = os.path.dirname(spec.origin)
    return found if own is None or _same_dir(found, own) else None


def package_problem() -> str | None:
    """:func:`path_problem` of :func:`package_dir`; ``"absent"`` when this interpreter has no such package."""
    found = package_dir()
    if found is None:
        return "absent"
    return path_problem(found)


def import_own(name: str, package: str) -> ModuleType:
    """Import numabind's module ``name`` from the ``numabind`` package in the directory ``package``, whatever
    ``sys.path`` holds and without changing it. A ``numabind`` already imported from elsewhere is an
    :class:`ImportError` naming both places."""
    import importlib
    import importlib.util

    loaded = sys.modules.get(_PACKAGE)
    if loaded is None:
        init = os.path.join(package, "__init__.py")
        spec = importlib.util.spec_from_file_location(_PACKAGE, init, submodule_search_locations=[package])
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load numabind from {package}", name=_PACKAGE, path=init)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[_PACKAGE] = loaded
        try:
            spec.loader.exec_module(loaded)
        except BaseException:
            sys.modules.pop(_PACKAGE, None)
            raise
    else:
        where = os.path.dirname(getattr(loaded, "__file__", None) or "")
        if not where or not _same_dir(where, package):
            raise ImportError(f"this process already imported numabind from {where or 'nowhere'}, not from "
                              f"{package}", name=_PACKAGE)
    return importlib.import_module(name)


def announce(host: str, module: ModuleType, how: str) -> None:
    """Log once per process, at INFO through the drop-in's logger, that numabind implements ``host`` here."""
    if host in _announced:
        return
    _announced.add(host)
    import logging

    target = getattr(module, "logger", None)
    logger = target if isinstance(target, logging.Logger) else logging.getLogger(host)
    version = getattr(sys.modules.get(_PACKAGE), "__version__", "?")
    logger.info("numabind %s is in charge of %s in this process (%s): %s implements it; binding still "
                "happens only where the host's own options ask for it", version, host, how, module.__name__)


class _Alias:
    """A loader whose module is an existing one: the drop-in, under the host module's name as well."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.spec = module.__spec__

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        # the import system set __spec__ to the host name's spec: the drop-in keeps its own
        module.__spec__ = self.spec


class HostModuleFinder:
    """A ``sys.meta_path`` finder that answers each import named in ``routes`` (host module -> numabind module)
    with numabind's module; ``how`` says in the INFO line who installed it. ``check_path`` (numabind is not
    imported yet) checks the package first, as :func:`package_problem` does."""

    def __init__(self, routes: Mapping[str, str], how: str, check_path: bool = True) -> None:
        self.routes = dict(routes)
        self.how = how
        self.check_path = check_path

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        name = self.routes.get(fullname)
        if name is None:
            return None
        import importlib
        import importlib.util

        if not self.check_path:     # numabind's own code installed the finder: numabind is imported already
            module = importlib.import_module(name)
        else:
            package = package_dir()
            if package is None:
                _say(f"{fullname} stays the host's own: this Python ({sys.executable}) has no numabind")
                return None
            problem = path_problem(package)
            if problem is not None:
                _say(f"{fullname} stays the host's own: refusing to import numabind from a path another user "
                     f"can write: {problem}")
                return None
            try:
                module = import_own(name, package)
            except ImportError as e:
                if e.name != _PACKAGE:
                    raise
                _say(f"{fullname} stays the host's own: {e}")
                return None
        announce(fullname, module, self.how)
        return importlib.util.spec_from_loader(fullname, _Alias(module))   # type: ignore[arg-type]  # create/exec_module only


def install(routes: Mapping[str, str], how: str, check_path: bool = True) -> None:
    """Put a :class:`HostModuleFinder` for ``routes`` first on ``sys.meta_path`` (once; later calls add routes)."""
    for finder in sys.meta_path:
        known = getattr(finder, "routes", None)
        if type(finder).__name__ == "HostModuleFinder" and isinstance(known, dict):
            known.update(routes)
            return
    sys.meta_path.insert(0, HostModuleFinder(routes, how, check_path))


def _same_dir(entry: str, here: str) -> bool:
    try:
        return os.path.samefile(entry or os.curdir, here)
    except OSError:
        return False


def _chain(here: str) -> None:
    """Run the ``sitecustomize`` this one shadows, as ``site`` would have."""
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    spec = PathFinder.find_spec("sitecustomize", [p for p in sys.path if not _same_dir(p, here)])
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    problem = path_problem(os.path.abspath(__file__))
    if problem is None:
        install(ROUTES, "numabind instrument")
    else:
        _say(f"not routing {', '.join(ROUTES)} to numabind: refusing to run from a path another user can "
             f"write: {problem}")
    _chain(here)


if __name__ == "sitecustomize":
    _main()
