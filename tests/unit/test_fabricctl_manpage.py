"""fabricctl(8) (fabricctl/manpage.py), rendered from the parser: it names every command and every option of each,
the exit statuses of the table, -v, --debug and the environment; it is valid roff (groff renders it without a
warning, where groff is installed); the same fabricctl renders the same page (no date: the role's second run
changes nothing); and the fabricctl role installs it beside the bash completion."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from fabricctl import commands, manpage
from fabricctl.main import build_parser
from fabricctl.tree import walk

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def page() -> str:
    return manpage.render("9.9.9")


def test_it_names_every_command(page):
    nodes = [n for n in walk(build_parser()) if n.module is not None]
    assert {n.module for n in nodes} == set(commands.ALL)
    headings = [line for line in page.splitlines() if line.startswith(".SS ")]
    assert headings == [f'.SS "{manpage.escape(n.name)}"' for n in nodes]
    assert len(headings) == len(commands.NAMES)


def test_it_names_every_option_of_every_command(page):
    for node in walk(build_parser()):
        for opt in node.options:
            for flag in opt.flags:
                assert f"\\fB{manpage.escape(flag)}\\fR" in page, (node.name, flag)


def test_exit_statuses_environment_and_files(page):
    section = page.split(".SH EXIT STATUS\n", 1)[1].split(".SH ", 1)[0]
    from fabric_core.base.errors import EXIT_STATUSES

    for status, meaning in EXIT_STATUSES:
        assert f".TP\n\\fB{status}\\fR\n{manpage.escape(meaning)}\n" in section
    for name in ("FABRICCTL_CONFIG", "FABRICCTL_DEBUG"):
        assert f"\\fB{name}\\fR" in page
    assert "\\fB\\-v\\fR, \\fB\\-\\-verbose\\fR" in page and "\\fB\\-\\-debug\\fR" in page
    assert page.startswith('.TH FABRICCTL 8 "" "fabricctl 9.9.9" "System Administration"\n')


def test_no_text_line_is_read_as_a_request(page):
    macros = {".TH", ".SH", ".SS", ".PP", ".TP", ".RS", ".RE", ".nf", ".fi"}
    for line in page.splitlines():
        if line.startswith((".", "'")):
            assert line.split(" ", 1)[0] in macros, line


def test_the_same_fabricctl_renders_the_same_page():
    assert manpage.render("1.0") == manpage.render("1.0")


@pytest.mark.skipif(shutil.which("groff") is None, reason="no groff")
def test_groff_renders_it_without_a_warning(page):
    done = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=page, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0 and done.stderr == ""


def test_main_writes_the_file(tmp_path, capsys):
    target = tmp_path / "fabricctl.8"
    assert manpage.main([str(target)]) == 0
    assert target.read_text().startswith(".TH FABRICCTL 8 ")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert manpage.main([]) == 0 and capsys.readouterr().out == target.read_text()


def test_the_role_installs_it_beside_the_completion_and_removes_it():
    present = yaml.safe_load((REPO / "roles/fabricctl/tasks/present.yml").read_text())
    absent = yaml.safe_load((REPO / "roles/fabricctl/tasks/absent.yml").read_text())
    # one command on the node prints the completion and renders the page; the role's one fabric_files task installs
    # each, from its part of that output
    printed = [t for t in present
               if "fabricctl.manpage" in " ".join(t.get("ansible.builtin.command", {}).get("argv", []))]
    assert len(printed) == 1 and "completion bash" in printed[0]["ansible.builtin.command"]["argv"][2]
    separator = printed[0]["vars"]["__fabricctl_generated_separator"]
    installs = [t for t in present if "__fabricctl_generated_files" in t.get("vars", {})]
    assert len(installs) == 1 and "gpufabric.storage.fabric_files" in installs[0]
    parts = {item["path"]: item["content"] for item in installs[0]["vars"]["__fabricctl_generated_files"]
             if "content" in item}
    assert set(parts) == {"/etc/bash_completion.d/fabricctl", manpage.INSTALLED_AT}
    assert "split(__fabricctl_generated_separator)[0]" in parts["/etc/bash_completion.d/fabricctl"]
    assert "split(__fabricctl_generated_separator)[1]" in parts[manpage.INSTALLED_AT]
    assert installs[0]["vars"]["__fabricctl_generated_separator"] == separator
    removed = next(t for t in absent if "ansible.builtin.file" in t and "loop" in t)["loop"]
    assert manpage.INSTALLED_AT in removed
