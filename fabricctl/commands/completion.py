"""Print the bash completion script of fabricctl: command words, each command's options (after a -) and
the choices of options that have them, generated from this fabricctl's own command tree (plain bash, no
Python runs at TAB). The fabricctl role installs it as /etc/bash_completion.d/fabricctl on every run
(bash-completion loads that directory); without the role, or in one shell only:

Examples:
  fabricctl completion bash > /etc/bash_completion.d/fabricctl
  source <(fabricctl completion bash)
"""

from __future__ import annotations

from ..about import fabricctl_version
from ..completion import bash_script

PATH = ("completion",)
HELP = "print the bash completion script (the fabricctl role installs it)"
MUTATING = False  # prints text; reads nothing on the node


def configure(p) -> None:
    p.add_argument("shell", choices=["bash"], help="the shell (bash)")


def run(ctx, args) -> int:
    script = bash_script(args.command_tree(), fabricctl_version())
    ctx.report({"shell": args.shell, "script": script}, script.rstrip("\n"))
    return 0
