# ruff: noqa: I001  (support must be imported first: it puts module_utils on the import path)
"""fabric_core.base.interrupt with real signals in a real process (its main thread): the first SIGINT raises
KeyboardInterrupt, a second one during the clean-up does not cut it short, the handler is restored after the
block; fabricctl's and fabric-node's main run inside it. A second SIGINT is what `timeout -s INT` sends (to the
command and to its process group) and what a user's second Ctrl-C sends."""

from __future__ import annotations

import os
import subprocess
import sys

import support  # noqa: F401
from support import REPO

PATH = os.pathsep.join([str(REPO / "plugins" / "module_utils"), str(REPO)])

# Ctrl-C raises KeyboardInterrupt at the start, as in a terminal: a process started in the background by a
# non-interactive shell (`make test` runs the unit tests so, beside the labs) inherits SIGINT ignored
TERMINAL = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"

BODY = r"""
import os, signal, sys, time
from fabric_core.base import interrupt

def sigint():
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs at the next bytecode of the main thread

steps = []
with interrupt.first_only() as seen:
    try:
        sigint()
        steps.append("not interrupted")
    except KeyboardInterrupt:
        steps.append("interrupted")
        sigint()  # a second SIGINT while cleaning up
        steps.append("clean-up finished")
print(",".join(steps), seen.received, seen.ignored)
print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""
CHILD = TERMINAL + BODY


def run(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": PATH, **env})


def test_the_first_sigint_interrupts_and_a_second_does_not_cut_the_clean_up_short():
    res = run(CHILD)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["interrupted,clean-up finished 2 1", "True"]


def test_without_the_block_a_second_sigint_cuts_the_clean_up_short():
    """What the block is for: Python's default handler raises again inside the clean-up."""
    res = run(CHILD.replace("with interrupt.first_only() as seen:", "if True:\n    seen = interrupt.Interrupts()"))
    assert res.returncode != 0 and "KeyboardInterrupt" in res.stderr
    assert "clean-up finished" not in res.stdout


def test_an_ignored_sigint_stays_ignored():
    """A parent that ignores SIGINT (a background job of a script) keeps it ignored: nothing is installed."""
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n" + BODY.replace(
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)",
        "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)")
    res = run(code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["not interrupted 0 0", "True"]


def test_fabricctl_and_fabric_node_run_their_commands_inside_the_block():
    """Each main's body (``_main``) runs with the block's handler installed, and the default is back after."""
    for module in ("fabricctl.main", "fabric_node.main"):
        code = (TERMINAL + f"import signal, {module} as m\n"
                "m._main = lambda *a, **k: print(signal.getsignal(signal.SIGINT) is not signal.default_int_handler)"
                " or 7\n"
                "print(m.main([]))\n"
                "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n")
        res = run(code)
        assert res.returncode == 0, (module, res.stderr)
        assert res.stdout.splitlines() == ["True", "7", "True"], module
