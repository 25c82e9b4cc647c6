"""Docs a newcomer can follow (issue 42 §6): what the README and docs claim is true, their examples run or
type-check, the docs build refuses faults docutils renders silently, and the manual page and the shell completion
are made from the same sources as the rest.

The Sphinx builds here run in process (the docs extra, ``pip install -e '.[docs]'``); the completion tests need
shtab (``pip install -e '.[completion]'``, which ``scripts/setup.sh --test`` installs) and skip without it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import numabind
from numabind.strategies import MODES
from tests.helpers import sphinx_build

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()
HOWTOS = sorted((DOCS / "howto").glob("*.rst"))
ALL_DOCS = sorted(DOCS.rglob("*.rst")) + [ROOT / "README.md"]

sys.path.insert(0, str(DOCS / "_ext"))
from doccheck import faults  # noqa: E402  (docs/_ext is not a package: the Sphinx extension itself)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# --------------------------------------------------------------------------- what the README claims
def test_readme_says_what_numactl_does_under_a_refusing_container():
    """numactl 2.0.16 under a seccomp filter prints the refused call and exits 1: not "a bare exit status"."""
    assert "bare exit status" not in README
    assert "`set_mempolicy: Operation not permitted`" in README and "exits 1" in README


def test_readme_api_names_the_shapes_of_nodes_and_verify_current():
    assert re.search(r"^topo\.nodes\s+# Mapping\[int, Node\]", README, re.M), "topo.nodes is a Mapping[int, Node]"
    assert "numabind.verify_current(plan).ok" in README and "BindReport" in README


def test_byte_for_byte_names_the_numactl_version():
    """Each "byte for byte" claim about numactl's output names the numactl it was compared with."""
    for path in ALL_DOCS:
        text = " ".join(path.read_text().split())
        for m in re.finditer(r"byte for byte", text):
            window = text[max(0, m.start() - 120):m.end() + 60]
            assert "numactl 2.0.19" in window, f"{_rel(path)}: {window!r}"


def test_readme_speed_table_is_in_milliseconds_beside_numactl_and_lstopo():
    speed = README[README.index("## Speed"):README.index("## Documentation")]
    table = [line for line in speed.splitlines() if line.startswith("|")]
    assert table and not [line for line in table if "✗" in line or "✓" in line or "goal" in line.lower()], table
    for tool in ("`numactl -H`", "`lstopo-no-graphics`", "`numactl -N 0 -m 0 /bin/true`", "`python -c pass`"):
        assert tool in speed, tool
    assert re.search(r"\| `numabind hardware` \| \d+(\.\d+)? ms", speed), speed
    assert "ms" in speed and "docs/benchmarks.rst" in speed


# --------------------------------------------------------------------------- getting numabind
INDEX_INSTALL = re.compile(r"pip install\s+['\"]?numabind(\[[a-z,]+\])?['\"]?(?![\w./-])")


@pytest.mark.parametrize("path", ALL_DOCS, ids=_rel)
def test_no_page_tells_a_newcomer_to_install_from_an_index(path: Path):
    """numabind is on no package index: a page may name ``pip install numabind`` only to say it finds nothing."""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if INDEX_INSTALL.search(line):
            assert "finds nothing" in line, f"{_rel(path)}:{n}: {line.strip()}"


@pytest.mark.parametrize("path", HOWTOS, ids=_rel)
def test_every_howto_says_how_to_build_and_install_the_wheel(path: Path):
    text = path.read_text()
    assert ".. include:: ../_include/install-line.rst" in text.split("\n\n", 3)[1], "right under the title"
    line = (DOCS / "_include" / "install-line.rst").read_text()
    assert "python -m build --wheel" in line and "pip install dist/numabind-*.whl" in line
    assert ":doc:`/install`" in line and "docker/Dockerfile" in line


def test_no_extra_re_resolves_a_framework():
    """Installing numabind (any extra) into a vLLM or Ray image must never re-resolve vLLM, Ray or torch."""
    from tests.helpers import read_toml, requirement_names

    project = read_toml(ROOT / "pyproject.toml")["project"]
    extras = project["optional-dependencies"]
    frameworks = {"vllm", "ray", "torch", "sglang", "tensorrt-llm"}
    for name, requirements in extras.items():
        assert not requirement_names(requirements) & frameworks, (name, requirements)
    assert not requirement_names(project["dependencies"]) & frameworks
    assert extras["vllm"] == [] and extras["ray"] == []   # kept: old requirement lines still install
    assert project["entry-points"]["vllm.general_plugins"] == {
        "numabind": "numabind.integrations.vllm_plugin:register"}
    assert requirement_names(extras["completion"]) == {"shtab"}


# --------------------------------------------------------------------------- the DGX-2 example
def _console(text: str, first: str) -> tuple[list[str], list[str]]:
    """The ``$ `` lines and the output of the literal block that holds a line starting with ``first``."""
    block = next(b for b in text.split("\n\n") if b.lstrip().startswith("$ ") and first in b)
    lines = [line[3:] for line in block.splitlines()]
    return [c[2:] for c in lines if c.startswith("$ ")], [c for c in lines if not c.startswith("$ ")]


def test_the_dgx2_example_runs_as_written(tmp_path: Path):
    """docs/cli.rst's lines take nvidiaDGX2.xml out of the test data archive and plan on it; the output shown
    is what numabind prints, and the README names the same extraction line."""
    commands, shown = _console((DOCS / "cli.rst").read_text(), "$ tar ")
    assert commands[0].startswith("tar ") and "tests/data/hwloc-xml/hwloc-2.14.0-tests-xml.tar.xz" in commands[0]
    assert commands[0] in README
    (tmp_path / "tests").symlink_to(ROOT / "tests")   # the command is run from the checkout's root
    subprocess.run(shlex.split(commands[0]), cwd=tmp_path, check=True, timeout=60)
    assert (tmp_path / "nvidiaDGX2.xml").stat().st_size > 0
    argv = shlex.split(commands[1])
    assert argv[0] == "numabind"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_VISIBLE_DEVICES") and k != "NUMABIND_FSROOT"}
    cp = subprocess.run([sys.executable, "-m", "numabind", *argv[1:]], cwd=tmp_path, capture_output=True,
                        text=True, timeout=120, env=env)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == shown


# --------------------------------------------------------------------------- the --mode table
def test_the_mode_table_explains_every_mode():
    table = (DOCS / "_include" / "modes.rst").read_text()
    rows = re.findall(r"^   \* - ``([a-z-]+)``", table, re.M)
    assert rows == ["--mode", *MODES], rows
    for included in ("cli.rst", "manpage.rst"):
        assert ".. include:: _include/modes.rst" in (DOCS / included).read_text(), included


# --------------------------------------------------------------------------- faults docutils renders silently
#: docutils as Sphinx runs it: quiet, and a lone section stays a section (no promotion to a subtitle).
SETTINGS = {"report_level": 5, "halt_level": 5, "doctitle_xform": False}


def _doctree(text: str) -> Any:
    from docutils.core import publish_doctree

    return publish_doctree(text, settings_overrides=SETTINGS)


SPLIT_LITERAL = """
+----------------+----------------+
| what           | numabind       |
+================+================+
| ``--           | a warning      |
| cpu-compress`` |                |
+----------------+----------------+
"""
SINGLE_BACKTICKS = """
+----------------------------------+------+
| ``ZE_AFFINITY_MASK``,            | read |
| `ZE_ENABLE_PCI_ID_DEVICE_ORDER`` |      |
+----------------------------------+------+
"""
TWICE = """
Title
=====

Options
-------

text

Options
-------

more
"""
REPEATED = """
Title
=====

What is different, on purpose
-----------------------------

What is different, on purpose:

- a point
"""


@pytest.mark.parametrize("text, words", [
    (SPLIT_LITERAL, "split across lines of a table cell"),
    (SINGLE_BACKTICKS, "single backticks"),
    (TWICE, "appears twice"),
    (REPEATED, "repeats the section title"),
], ids=["split-literal", "single-backticks", "title-twice", "title-repeated"])
def test_the_doc_check_finds_each_fault(text: str, words: str):
    found = [message for _, message in faults(_doctree(text))]
    assert len(found) == 1 and words in found[0], found


def test_the_doc_check_leaves_good_tables_alone():
    good = SPLIT_LITERAL.replace("| ``--           |", "| ``--cpu-comp`` |").replace("| cpu-compress`` |",
                                                                                        "| and more       |")
    assert faults(_doctree(good)) == []
    assert faults(_doctree("A paragraph may wrap a literal: ``numabind\nrun``.\n")) == []


@pytest.mark.parametrize("path", sorted(DOCS.rglob("*.rst")), ids=_rel)
def test_the_docs_have_none_of_those_faults(path: Path):
    from docutils.core import publish_doctree

    doc = publish_doctree(path.read_text(), source_path=str(path), settings_overrides=SETTINGS)
    assert [message for _, message in faults(doc)] == []


def test_sphinx_with_the_extension_fails_on_a_split_literal(tmp_path: Path):
    """The check runs inside the docs build: ``-W`` turns its warning into a failed build, naming the file."""
    (tmp_path / "conf.py").write_text(f"import sys\nsys.path.insert(0, {str(DOCS / '_ext')!r})\n"
                                      "extensions = ['doccheck']\n")
    (tmp_path / "index.rst").write_text("Index\n=====\n" + SPLIT_LITERAL)
    rc, err = sphinx_build(tmp_path, tmp_path / "out", "html")
    assert rc != 0 and "index.rst" in err and "split across lines of a table cell" in err, err
    (tmp_path / "index.rst").write_text("Index\n=====\n\nfine ``literal``\n")
    rc, err = sphinx_build(tmp_path, tmp_path / "out2", "html")
    assert rc == 0, err
    assert "doccheck" in (DOCS / "conf.py").read_text()


# --------------------------------------------------------------------------- the docs' Python type-checks
#: Names the docs' typed fragments use without defining them (they come from the text around each example).
PREAMBLE = '''
import mmap
import multiprocessing
import subprocess
from multiprocessing import Pool

import numabind

plan: numabind.Plan = numabind.Plan(cpus=frozenset({0}))
plan0 = plan1 = plan
argv: list[str] = ["true"]
buf = bytearray(4096)
pid = 1


def work() -> None: ...
'''


def _typed_blocks() -> list[tuple[str, str]]:
    """Every ``.. code:: python`` block marked ``:class: typed`` in the docs, as (where, code)."""
    out = []
    for path in sorted(DOCS.rglob("*.rst")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() == ".. code:: python" and i + 1 < len(lines) and lines[i + 1].strip() == ":class: typed":
                body = []
                for row in lines[i + 2:]:
                    if row and not row.startswith("   "):
                        break
                    body.append(row[3:])
                out.append((f"{_rel(path)}:{i + 1}", "\n".join(body).strip("\n")))
    return out


def _checked_source() -> str:
    """The typed blocks, each in a function of its own (its names stay its own), after the preamble."""
    parts = [PREAMBLE]
    for n, (where, code) in enumerate(_typed_blocks()):
        body = "\n".join("    " + line if line else "" for line in code.splitlines())
        parts.append(f"\n\n# {where}\ndef example_{n}() -> None:\n{body}\n")
    return "".join(parts)


def test_the_typed_examples_are_the_ones_newcomers_copy():
    where = [w.split(":")[0] for w, _ in _typed_blocks()]
    assert "docs/guide.rst" in where and "docs/howto/multiprocessing.rst" in where and "docs/api.rst" in where
    births = [code for _, code in _typed_blocks() if "births.report(" in code]
    assert len(births) == 2 and all("if child.report is None" in code for code in births)
    for path in ALL_DOCS:   # no page reads a child's report without the check
        assert not re.search(r"\.report\([^)]*\)\.report\.", path.read_text()), _rel(path)


def test_the_docs_python_examples_type_check_under_mypy_strict(tmp_path: Path):
    from tests.helpers import mypy_strict

    proc = mypy_strict(tmp_path, "docs_examples.py", _checked_source())
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_docs_python_examples_type_check_under_pyright(tmp_path: Path):
    from tests.helpers import pyright_strict

    # fragments of prose: an example may show a value without using it; every type rule stays strict
    quiet = "# pyright: reportUnusedImport=false, reportUnusedVariable=false, reportUnusedExpression=false\n"
    proc = pyright_strict(tmp_path, "docs_examples.py", quiet + _checked_source())
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


# --------------------------------------------------------------------------- the manual page
SUBCOMMANDS = ("hardware", "show", "topology", "plan", "run", "stat", "move", "instrument", "completion")


@pytest.mark.packaging
def test_the_man_page_builds_from_the_docs_and_renders(tmp_path: Path):
    rc, err = sphinx_build(DOCS, tmp_path / "man", "man")
    assert rc == 0, err
    page = tmp_path / "man" / "numabind.1"
    text = page.read_text()
    assert '.TH "NUMABIND" "1"' in text
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "PLACEMENT MODES", "EXIT STATUS",
                    "ENVIRONMENT", "SHELL COMPLETION", "SEE ALSO"):
        assert f'.SH {section}\n' in text or f'.SH "{section}"\n' in text, section
    words = text.replace("\\-", "-")   # roff escapes each hyphen
    for word in SUBCOMMANDS:
        assert f"numabind {word}" in words, word
    for mode in MODES:
        assert f"\\fB{mode}\\fP" in words, mode   # a row of the placement-mode table
    man = shutil.which("man")
    if man is None:
        return   # the sections above are the check where man-db is absent
    cp = subprocess.run([man, "-l", str(page)], capture_output=True, text=True, timeout=60,
                        env={**os.environ, "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "100"})
    assert cp.returncode == 0, cp.stderr
    shown = re.sub(r".\x08", "", cp.stdout)
    assert "numabind - bind CPU affinity and NUMA memory policy" in shown and "SYNOPSIS" in shown
    assert "numabind completion bash|zsh" in shown


# --------------------------------------------------------------------------- shell completion
def _completion(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "numabind.cli.completion", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_bash_completion_completes_the_parsers_words(tmp_path: Path):
    pytest.importorskip("shtab", reason="the completion extra: pip install -e '.[completion]'")
    cp = _completion("bash")
    assert cp.returncode == 0, cp.stderr
    script = tmp_path / "numabind.bash"
    script.write_text(cp.stdout)

    def complete(*words: str) -> set[str]:
        line = " ".join(shlex.quote(w) for w in words)
        probe = (f"source {shlex.quote(str(script))}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
                 f"COMP_LINE={shlex.quote(' '.join(words))}; COMP_POINT=${{#COMP_LINE}}; "
                 "_shtab_numabind; printf '%s\\n' \"${COMPREPLY[@]}\"")
        out = subprocess.run(["bash", "--norc", "--noprofile", "-c", probe], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        return {w.strip() for w in out.stdout.splitlines() if w.strip()}

    from numabind.cli.commands import build_parser

    parser_words = set(next(a for a in build_parser()._actions if a.dest == "cmd").choices)   # type: ignore[arg-type]
    assert complete("numabind", "") >= parser_words
    assert "plan" in complete("numabind", "pl")
    assert complete("numabind", "run", "--mo") == {"--mode"}
    assert complete("numabind", "plan", "--mode", "") == set(MODES)


def test_zsh_completion_is_generated_from_the_same_parser():
    pytest.importorskip("shtab", reason="the completion extra: pip install -e '.[completion]'")
    cp = _completion("zsh")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.startswith("#compdef numabind") and "_shtab_numabind" in cp.stdout
    for word in ("hardware", "topology", "core-complex", "--gpu-from-rank"):
        assert word in cp.stdout, word
    zsh = shutil.which("zsh")
    if zsh:
        syntax = subprocess.run([zsh, "-n"], input=cp.stdout, capture_output=True, text=True, timeout=60)
        assert syntax.returncode == 0, syntax.stderr


def test_completion_without_shtab_names_the_fix():
    cp = subprocess.run([sys.executable, "-c", "import sys; sys.modules['shtab'] = None\n"
                         "from numabind.cli.completion import main; raise SystemExit(main(['bash']))"],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 1 and cp.stdout == ""
    assert cp.stderr.strip() == ("numabind: error: completion: the shtab package is not installed; fix: pip install "
                                 "shtab (the completion extra) in numabind's environment")


def test_completion_refuses_an_unknown_shell_as_a_usage_error():
    cp = _completion("fish")
    assert cp.returncode == 2 and "invalid choice: 'fish'" in cp.stderr
    from numabind.cli.completion import CompletionError, script

    with pytest.raises(CompletionError) as exc:
        script("fi\x1bsh")
    assert exc.value.exit_status == 2 and "\x1b" not in str(exc.value) and "'fi?sh'" in str(exc.value)
    assert isinstance(exc.value, numabind.NumabindError)


def test_numabind_completion_is_a_subcommand():
    """``numabind completion SHELL`` (the dispatch and the full CLI, options first) prints what the module prints;
    numabind's own completion completes ``completion`` and its shells."""
    pytest.importorskip("shtab", reason="the completion extra: pip install -e '.[completion]'")
    want = _completion("bash").stdout
    for args in (["completion", "bash"], ["--json", "completion", "bash"]):
        cp = subprocess.run([sys.executable, "-m", "numabind", *args], capture_output=True, text=True, timeout=120)
        assert cp.returncode == 0 and cp.stdout == want, (args, cp.stderr)
    assert "completion" in want and "zsh" in want
    cp = subprocess.run([sys.executable, "-m", "numabind", "completion", "fish"], capture_output=True, text=True,
                        timeout=120)
    assert cp.returncode == 2 and "invalid choice: 'fish'" in cp.stderr


def test_help_explains_each_mode_in_one_line_and_the_top_level_names_numactls_form_and_roots():
    from numabind.strategies import MODE_SUMMARIES

    assert list(MODE_SUMMARIES) == list(MODES)
    for sub in ("plan", "run"):
        cp = subprocess.run([sys.executable, "-m", "numabind", sub, "--help"], capture_output=True, text=True,
                            timeout=120)
        assert cp.returncode == 0, cp.stderr
        lines = cp.stdout.splitlines()
        for mode in MODES:
            line = [ln for ln in lines if ln.split()[:1] == [mode]]
            assert line == [f"  {mode:<13} {MODE_SUMMARIES[mode]}"], (sub, mode, line)
    top = subprocess.run([sys.executable, "-m", "numabind", "--help"], capture_output=True, text=True,
                         timeout=120).stdout
    assert "numabind -N 0 -m 0 CMD" in top and "numabind -H" in top
    for kind in ("a directory holding sys/ and proc/", "hwloc-gather-topology tarball", "hwloc XML file"):
        assert kind in top, kind
