"""fabricctl(8), the manual page, rendered in roff from fabricctl's own parser (main.build_parser, through
fabricctl.tree), like the CLI reference and the bash completion: every command's usage, description (its module's
docstring) and options, the exit statuses (fabric_core.base.errors.EXIT_STATUSES), the environment and the files. The
fabricctl role writes it to /usr/local/share/man/man8/fabricctl.8 from the installed fabricctl on every run
(``python -m fabricctl.manpage``; with PATH it writes that file), so it is as current as the commands. No date in
it: the same fabricctl renders the same page (the role's second run changes nothing).

    python -m fabricctl.manpage | man -l -      # read it without installing it
"""

from __future__ import annotations

import re
import sys

from fabric_core.base import atomic
from fabric_core.base.errors import EXIT_STATUSES

from .about import fabricctl_version
from .main import DEBUG_ENV, DESCRIPTION, build_parser
from .tree import Node, Option, usage, walk

SECTION = "8"  # system administration: fabricctl runs as root on a storage node
INSTALLED_AT = "/usr/local/share/man/man8/fabricctl.8"  # where the fabricctl role writes it
ENVIRONMENT = (
    ("FABRICCTL_CONFIG", "the configuration file when --config is not given (default /etc/fabricctl/config.yml)."),
    (DEBUG_ENV, "set (to anything but empty or 0): as --debug, the traceback of an error is printed on stderr."),
)
FILES = (
    ("/etc/fabricctl/config.yml", "the configuration (0600: it holds the CHAP secrets), written by the role."),
    ("/run/fabric/node.lock", "this node's lock, shared with the Ansible modules that change LIO and ZFS."),
    ("/run/fabric/locks/", "one lock per object (KIND-NAME.lock) for long work on that object."),
    ("/etc/bash_completion.d/fabricctl", "the bash completion (fabricctl completion bash), written by the role."),
    (INSTALLED_AT, "this page, written by the role."),
)
SEE_ALSO = ("zfs(8), zpool(8), targetcli(8), iscsiadm(8), journalctl(1): journalctl -t fabricctl has one record per "
            "change. The guide, docs/fabricctl.md, and the reference, docs/fabricctl-reference.md, of the repository "
            "fabricctl comes from.")


def escape(text: str) -> str:
    """Text as roff reads it literally: backslashes, hyphens (\\- so that options copy as ASCII), and a line that
    would begin with a control character (. or ')."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n"))


def _bold(text: str) -> str:
    return f"\\fB{escape(text)}\\fR"


def _synopsis(parser) -> list[str]:
    """The parser's usage without argparse's "usage: " (its continuation lines moved left as much)."""
    lines = usage(parser).splitlines()
    head = "usage: "
    lines = [lines[0].removeprefix(head)] + [line[len(head):] if line.startswith(" " * len(head)) else line
                                             for line in lines[1:]]
    return _literal("\n".join(lines))


def _literal(text: str) -> list[str]:
    """A block kept as it is (usage lines, examples)."""
    return [".nf", *[escape(line.rstrip()) or "\\&" for line in text.strip("\n").splitlines()], ".fi"]


def _prose(text: str) -> list[str]:
    """A docstring: paragraphs filled, indented lines (examples, tables) kept as they are."""
    out: list[str] = []
    lines = text.strip("\n").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            out.append(".PP")
            i += 1
        elif line.startswith(" "):
            block = []
            while i < len(lines) and lines[i].startswith(" "):
                block.append(lines[i])
                i += 1
            out += [".RS", *_literal("\n".join(block)), ".RE"]
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(" "):
                para.append(lines[i].strip())
                i += 1
            out.append(escape(" ".join(para)))
    return out


def _option(opt: Option) -> list[str]:
    if opt.positional:
        head = f"\\fI{escape(opt.metavar)}\\fR" + (" ..." if opt.repeatable else "")
    else:
        value = f" \\fI{escape(opt.metavar)}\\fR" if opt.takes_value else ""
        head = ", ".join(f"{_bold(flag)}{value}" for flag in opt.flags)
    notes = []
    if opt.choices:
        notes.append("one of " + ", ".join(opt.choices))
    if opt.required and not opt.positional:
        notes.append("required")
    if opt.repeatable and not opt.positional:
        notes.append("repeatable")
    text = " ".join(opt.help.split()) + (f" ({'; '.join(notes)})" if notes else "")
    return [".TP", head, escape(text)]


def _command(node: Node) -> list[str]:
    doc = (node.module.__doc__ or "").strip() or node.help
    out = [f'.SS "{escape(node.name)}"', escape(node.help[:1].upper() + node.help[1:] + "."), ".PP",
           *_synopsis(node.parser), ".PP", *_prose(doc)]
    for opt in node.options:
        out += _option(opt)
    return out


def render(version: str | None = None) -> str:
    """The page (roff) of the commands registered now (fabricctl.commands.ALL)."""
    version = fabricctl_version() if version is None else version
    nodes = walk(build_parser())
    root, commands = nodes[0], [n for n in nodes if n.module is not None]
    description = DESCRIPTION.split("Exit statuses:", 1)[0]
    summary = " ".join(description.strip().split("\n\n", 1)[0].split()).split(":", 1)[0]  # "Operate the ... node"
    out = [f'.TH FABRICCTL {SECTION} "" "fabricctl {escape(version)}" "System Administration"',
           ".SH NAME", f"fabricctl \\- {escape(summary[:1].lower() + summary[1:])}",
           ".SH SYNOPSIS", *_synopsis(root.parser),
           ".SH DESCRIPTION", *_prose(description),
           ".PP", escape("Every command takes --json (its result as one JSON object on stdout; a failure too: "
                         "{\"error\", \"fix\", \"exit_status\", \"error_type\"}) and -h; a change takes --dry-run."),
           ".SH OPTIONS"]
    for opt in root.options:
        out += _option(opt)
    out += [".SH COMMANDS"]
    for node in commands:
        out += _command(node)
    out += [".SH EXIT STATUS"]
    for status, meaning in EXIT_STATUSES:
        out += [".TP", _bold(str(status)), escape(meaning)]
    out += [".PP", escape("fabricctl status exits by the monitoring-plugin convention instead: 0 OK, 1 WARNING, "
                          "2 CRITICAL, 3 UNKNOWN.")]
    out += [".SH ENVIRONMENT"]
    for name, text in ENVIRONMENT:
        out += [".TP", _bold(name), escape(text)]
    out += [".SH FILES"]
    for name, text in FILES:
        out += [".TP", f"\\fI{escape(name)}\\fR", escape(text)]
    out += [".SH SEE ALSO", escape(SEE_ALSO)]
    text = "\n".join(out) + "\n"
    return re.sub(r"\n(?:\.PP\n)+(\.(?:PP|SH|SS|TP)\b)", r"\n\1", text)  # no empty paragraph before a heading


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if argv:
        atomic.write_file(argv[0], text, mode=0o644)  # fabricctl's one file writer
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
