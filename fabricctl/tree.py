"""fabricctl's command tree as data, read from the parser ``main.build_parser`` makes: every command path,
its parser, one-line help, command module, the command words under it and its options. The bash
completion (fabricctl.completion) and the CLI reference (fabricctl.reference) are made from it, so
neither can disagree with the parser. argparse keeps the tree in private attributes: only this module
reads them.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

USAGE_WIDTH = 100  # columns of a rendered usage: the same wherever it is rendered (not the terminal's)


@dataclass(frozen=True)
class Option:
    """One argument of a command: an option (``flags``: ``("-h", "--help")``) or a positional (no flags)."""

    flags: tuple[str, ...]
    dest: str
    metavar: str  # the value's name; "" for an option that takes no value
    help: str  # with argparse's %(default)s and the like expanded
    choices: tuple[str, ...]
    required: bool
    repeatable: bool  # action="append", or a positional of several values

    @property
    def positional(self) -> bool:
        return not self.flags

    @property
    def takes_value(self) -> bool:
        return bool(self.metavar)


@dataclass(frozen=True)
class Node:
    """A command path: ``()`` is fabricctl itself, ``("dataset",)`` a group, ``("dataset", "create")`` a command."""

    path: tuple[str, ...]
    parser: argparse.ArgumentParser
    help: str  # the line in the parent's list of commands ("" for fabricctl itself)
    module: Any  # the command module (fabricctl.commands.*) of a command; None for a group or the root
    children: tuple[str, ...]  # the command words under this one, in the parser's order
    options: tuple[Option, ...]

    @property
    def name(self) -> str:
        return " ".join(("fabricctl", *self.path))


def walk(parser: argparse.ArgumentParser) -> list[Node]:
    """Every node of the tree, depth first, in the parser's order (commands.ALL's)."""
    out: list[Node] = []

    def visit(p: argparse.ArgumentParser, path: tuple[str, ...], help_text: str) -> None:
        sub = _subparsers(p)
        children = tuple(sub.choices) if sub else ()
        out.append(Node(path=path, parser=p, help=help_text, module=p.get_default("command_module"),
                        children=children, options=tuple(_options(p))))
        if sub:
            helps = {a.dest: a.help or "" for a in sub._choices_actions}
            for word, child in sub.choices.items():
                visit(child, (*path, word), helps.get(word, ""))

    visit(parser, (), "")
    return out


def usage(parser: argparse.ArgumentParser, width: int = USAGE_WIDTH) -> str:
    """The parser's usage line(s), ``usage: fabricctl ...``, wrapped at ``width`` columns."""
    formatter = argparse.HelpFormatter(prog=parser.prog, width=width)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _options(parser: argparse.ArgumentParser) -> list[Option]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        takes = action.nargs != 0
        metavar = action.metavar if isinstance(action.metavar, str) else None
        if not takes:
            metavar = ""
        elif metavar is None:
            metavar = action.dest.upper() if action.option_strings else action.dest
        out.append(Option(flags=tuple(action.option_strings), dest=action.dest, metavar=metavar,
                          help=_expand(action, parser.prog), choices=tuple(str(c) for c in action.choices or ()),
                          required=bool(action.required),
                          repeatable=isinstance(action, argparse._AppendAction) or action.nargs in ("+", "*")))
    return out


def _expand(action: argparse.Action, prog: str) -> str:
    """The help text as --help prints it: %(default)s, %(choices)s, %(prog)s... filled in (as argparse does)."""
    text = action.help or ""
    if "%" not in text:
        return text
    params = {k: v for k, v in dict(vars(action), prog=prog).items() if v is not argparse.SUPPRESS}
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(c) for c in params["choices"])
    return text % params
