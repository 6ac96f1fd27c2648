"""Bash completion of fabricctl: a static script generated from the command tree (fabricctl.tree), printed
by ``fabricctl completion bash``; the fabricctl role writes it to /etc/bash_completion.d/fabricctl.

It completes the command words (``fabricctl dat<TAB>``, ``fabricctl checkpoint volume <TAB>``), a
command's options after a ``-`` (``fabricctl publish --<TAB>``) and the values of options with choices
(``--fs <TAB>``); anything else (a version, a path) falls back to bash's file names. It is plain bash
(no bash-completion helpers, no Python at TAB: instant), so it also works sourced by hand
(``source <(fabricctl completion bash)``). Being generated, it is as current as the fabricctl that
printed it: the role regenerates it on every run.
"""

from __future__ import annotations

import re

from .tree import Node, walk

FUNCTION = "_fabricctl"
_SAFE = re.compile(r"^[A-Za-z0-9_.:,+=/@-]+$")  # words written into the script unquoted


def _words(items) -> str:
    items = list(items)
    for item in items:
        if not _SAFE.fullmatch(item):
            raise ValueError(f"{item!r} cannot be completed by the bash script (characters outside {_SAFE.pattern})")
    return " ".join(items)


def _node_case(node: Node) -> str:
    options = sorted(flag for opt in node.options for flag in opt.flags)
    values = sorted(flag for opt in node.options if opt.takes_value for flag in opt.flags)
    arguments = [c for opt in node.options if opt.positional for c in opt.choices]
    return (f'        "{" ".join(node.path)}") words="{_words(node.children)}"; args="{_words(arguments)}"\n'
            f'            opts="{_words(options)}"; values="{_words(values)}" ;;\n')


def _choices_cases(nodes: list[Node]) -> str:
    out = []
    for node in nodes:
        for opt in node.options:
            if opt.flags and opt.choices:
                for flag in opt.flags:
                    out.append(f'        "{" ".join((*node.path, flag))}") echo "{_words(opt.choices)}" ;;\n')
    return "".join(out)


def bash_script(parser, version: str = "") -> str:
    """The completion script of the tree under ``parser`` (main.build_parser())."""
    nodes = walk(parser)
    prog = parser.prog
    made_by = f"`{prog} completion bash`" + (f" of {prog} {version}" if version else "")
    return f"""\
# bash completion of {prog}: command words, each command's options (after a -), and option choices.
# Generated from {prog}'s command tree by {made_by}.
# Do not edit: the fabricctl role rewrites it.
{FUNCTION}_node() {{  # the command path $1 -> words (sub-commands), args (positional choices), opts, values
    case $1 in
{"".join(_node_case(n) for n in nodes)}        *) words=""; args=""; opts=""; values="" ;;
    esac
}}
{FUNCTION}_choices() {{  # the choices of option $2 of command path $1 (empty: any value)
    case "${{1:+$1 }}$2" in
{_choices_cases(nodes)}    esac
}}
{FUNCTION}() {{
    local IFS=$' \\t\\n' cur=${{COMP_WORDS[COMP_CWORD]}} prev="" path="" word i skip=0 words args opts values
    ((COMP_CWORD > 0)) && prev=${{COMP_WORDS[COMP_CWORD-1]}}
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${{COMP_WORDS[i]}}
        if ((skip)); then skip=0; continue; fi
        {FUNCTION}_node "$path"
        if [[ " $values " == *" $word "* ]]; then
            skip=1
        elif [[ $word != -* && " $words " == *" $word "* ]]; then
            path=${{path:+$path }}$word
        fi
    done
    {FUNCTION}_node "$path"
    COMPREPLY=()
    if ((skip)); then  # the value of option $prev
        COMPREPLY=($(compgen -W "$({FUNCTION}_choices "$path" "$prev")" -- "$cur"))
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$words $args" -- "$cur"))
    fi
    return 0  # no candidate: bash's own file names (complete -o default)
}}
complete -o default -F {FUNCTION} {prog}
"""
