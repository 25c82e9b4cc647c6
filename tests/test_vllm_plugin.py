"""The ``vllm.general_plugins`` entry point: installing numabind makes it implement ``vllm.utils.numa_utils`` in every
vLLM process that loads plugins, with no edit to vLLM (issue 27).

The fake vLLM in ``tmp_path`` follows vLLM's plugin semantics: ``vllm.plugins.load_general_plugins()`` runs once
per process, finds the group's entry points through ``importlib.metadata.entry_points(group=...)``, keeps only
the names ``VLLM_PLUGINS`` (comma-separated) lists when it is set, loads each and calls it. numabind's entry
point is read from pyproject.toml into a ``numabind`` dist-info beside it, so the declaration that ships is the
one tested. Everything runs in real child processes, spawned ones included. When a real vLLM is importable
(``pip install --no-deps vllm``: its ``vllm.plugins`` needs only torch), the last test loads the plugin through
it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
HOST = "vllm.utils.numa_utils"

FAKE_VLLM = {
    "vllm/__init__.py": "",
    "vllm/envs.py": (
        "import os\n"
        "def __getattr__(name):\n"
        "    if name == 'VLLM_PLUGINS':\n"
        "        value = os.environ.get('VLLM_PLUGINS')\n"
        "        return None if value is None else value.split(',')\n"
        "    raise AttributeError(name)\n"),
    # vLLM's plugin loading, as documented: the group, the VLLM_PLUGINS allow-list, once per process
    "vllm/plugins/__init__.py": (
        "import logging\n"
        "from importlib.metadata import entry_points\n"
        "import vllm.envs as envs\n"
        "DEFAULT_PLUGINS_GROUP = 'vllm.general_plugins'\n"
        "plugins_loaded = False\n"
        "def load_general_plugins():\n"
        "    global plugins_loaded\n"
        "    if plugins_loaded:\n"
        "        return\n"
        "    plugins_loaded = True\n"
        "    allowed = envs.VLLM_PLUGINS\n"
        "    for ep in entry_points(group=DEFAULT_PLUGINS_GROUP):\n"
        "        if allowed is None or ep.name in allowed:\n"
        "            try:\n"
        "                func = ep.load()\n"
        "            except Exception:\n"
        "                logging.getLogger(__name__).exception('Failed to load plugin %s', ep.name)\n"
        "                continue\n"
        "            func()\n"),
    "vllm/utils/__init__.py": "",
    "vllm/utils/numa_utils.py": (
        "HOST_OWN = True\n"
        "def configure_subprocess(*args, **kwargs):\n"
        "    return \"vLLM's own\"\n"
        "def only_in_vllm():\n"
        "    return \"vLLM's own\"\n"),
    # vLLM's executor holds the module object from its own import, made before plugins load
    "vllm/v1/__init__.py": "",
    "vllm/v1/executor.py": "from vllm.utils import numa_utils\n",
    "other_plugin.py": "import builtins\ndef register():\n    builtins.OTHER_PLUGIN_RAN = True\n",
}

REPORTER = '''
import builtins, importlib, json, multiprocessing as mp, os, sys

def observe(early):
    if early:
        import vllm.v1.executor
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    load_general_plugins()
    finder = any(type(f).__name__ == "HostModuleFinder" for f in sys.meta_path)
    try:
        m = importlib.import_module("vllm.utils.numa_utils")
    except ImportError as e:   # a real vLLM's own module, without its dependencies here
        return {"name": f"ImportError: {e}", "finder": finder}
    import vllm.utils
    out = {"name": m.__name__, "host_own": getattr(m, "HOST_OWN", False),
           "one_object": vllm.utils.numa_utils is m and sys.modules.get(m.__name__) is m,
           "other_plugin": getattr(builtins, "OTHER_PLUGIN_RAN", False), "finder": finder}
    if early:
        held = sys.modules["vllm.v1.executor"].numa_utils
        compat = sys.modules.get("numabind.compat.vllm")
        out["held_calls_numabind"] = compat is not None and held.configure_subprocess is compat.configure_subprocess
        out["held_keeps_the_rest"] = held.only_in_vllm() == "vLLM's own"
    return out

def child(q, early):
    q.put(observe(early))

if __name__ == "__main__":
    import logging
    logging.basicConfig(level=logging.INFO)
    early = sys.argv[1] == "early"
    result = {"parent": observe(early)}
    for method in sys.argv[2:]:
        ctx = mp.get_context(method)
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q, early))
        p.start()
        result[method] = q.get(timeout=300)
        p.join()
    print(json.dumps(result))
'''


def shipped_entry_point() -> dict[str, str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    return dict(project["entry-points"]["vllm.general_plugins"])


def write_dist(site: Path, name: str, entry_points: dict[str, str]) -> None:
    info = site / f"{name}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[vllm.general_plugins]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    """A site directory with numabind's shipped entry point and another plugin's."""
    site = tmp_path / "plugins"
    write_dist(site, "numabind", shipped_entry_point())
    write_dist(site, "other_plugin", {"other": "other_plugin:register"})
    (site / "other_plugin.py").write_text(FAKE_VLLM["other_plugin.py"])
    (tmp_path / "reporter.py").write_text(REPORTER)
    return tmp_path


@pytest.fixture
def fake_vllm(plugins: Path) -> Path:
    for rel, text in FAKE_VLLM.items():
        path = plugins / "vllm_site" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return plugins


def report(tmp: Path, when: str, *methods: str, vllm_site: Path | None = None,
           **env: str) -> tuple[dict[str, dict[str, object]], str]:
    child_env = {k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"}
    paths = [str(tmp / "plugins")] + ([str(vllm_site)] if vllm_site else [])
    child_env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])
    child_env.update(env)
    proc = subprocess.run([sys.executable, "reporter.py", when, *methods], cwd=tmp, env=child_env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


def test_pyproject_declares_the_plugin_and_the_extra():
    assert shipped_entry_point() == {"numabind": "numabind.integrations.vllm_plugin:register"}
    with open(ROOT / "pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    # the extra is kept for requirement lines that name it, and pulls in nothing: installing numabind[vllm] into a
    # vLLM image must never re-resolve vLLM (the plugin is found through the entry point alone)
    assert extras["vllm"] == []


def test_the_plugin_routes_the_module_in_the_launcher_and_each_spawned_process(fake_vllm):
    seen, stderr = report(fake_vllm, "late", "spawn", vllm_site=fake_vllm / "vllm_site")
    for where in ("parent", "spawn"):
        assert seen[where] == {"name": "numabind.compat.vllm", "host_own": False, "one_object": True,
                               "other_plugin": True, "finder": True}, where
    lines = [line for line in stderr.splitlines() if "is in charge of" in line]
    assert len(lines) == 1, stderr   # the parent's (the spawned child configures no logging); once, not twice
    assert lines[0].startswith("INFO:vllm.utils.numa_utils:numabind ")
    assert "binding still happens only where the host's own options ask for it" in lines[0]


def test_a_module_imported_before_the_plugin_ran_calls_numabind(fake_vllm):
    seen, _ = report(fake_vllm, "early", "spawn", vllm_site=fake_vllm / "vllm_site")
    for where in ("parent", "spawn"):
        got = seen[where]
        assert got["name"] == "numabind.compat.vllm" and got["one_object"], where
        assert got["held_calls_numabind"] is True and got["held_keeps_the_rest"] is True, where


@pytest.mark.parametrize("allowed, routed, other", [
    ("other", False, True),
    ("numabind", True, False),
    ("other,numabind", True, True),
    ("", False, False),
])
def test_vllm_plugins_chooses(fake_vllm, allowed, routed, other):
    seen, _ = report(fake_vllm, "late", vllm_site=fake_vllm / "vllm_site", VLLM_PLUGINS=allowed)
    got = seen["parent"]
    assert (got["name"] == "numabind.compat.vllm") is routed and got["host_own"] is not routed
    assert got["finder"] is routed
    assert got["other_plugin"] is other


def test_register_in_process_is_idempotent(monkeypatch, caplog):
    import logging

    from numabind.compat import vllm as compat
    from numabind.compat.bootstrap import sitecustomize as boot
    from numabind.integrations import vllm_plugin

    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(boot, "_announced", set())
    monkeypatch.delitem(sys.modules, HOST, raising=False)
    with caplog.at_level(logging.INFO, logger="vllm.utils.numa_utils"):
        vllm_plugin.register()
        vllm_plugin.register()
    finders = [f for f in sys.meta_path if type(f).__name__ == "HostModuleFinder"]
    assert len(finders) == 1 and finders[0].routes[HOST] == "numabind.compat.vllm"
    assert finders[0].check_path is False      # numabind's own code is running: its path was trusted already
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "is in charge of vllm.utils.numa_utils" in caplog.records[0].getMessage()
    assert compat.logger.name == HOST


def _real_vllm() -> str | None:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    plugins = Path(list(spec.submodule_search_locations)[0]) / "plugins" / "__init__.py"
    return str(plugins) if plugins.is_file() and "vllm.general_plugins" in plugins.read_text() else None


def test_the_plugin_through_the_real_vllm_plugins_module(plugins):
    real = _real_vllm()
    if real is None:
        pytest.skip("vLLM is not importable here (pip install --no-deps vllm, with torch, runs this test)")
    seen, stderr = report(plugins, "late", "spawn")
    for where in ("parent", "spawn"):
        assert seen[where] == {"name": "numabind.compat.vllm", "host_own": False, "one_object": True,
                               "other_plugin": True, "finder": True}, (where, stderr)
    assert "INFO:vllm.utils.numa_utils:numabind " in stderr
    seen, _ = report(plugins, "late", VLLM_PLUGINS="other")
    got = seen["parent"]
    assert got["finder"] is False and got["name"] != "numabind.compat.vllm"   # vLLM's own module: numabind left out
