"""Ctrl-C stops a command once: the first SIGINT raises KeyboardInterrupt, the ones after it are ignored.

A command stopped by Ctrl-C cleans up on its way out: a running command is killed and reaped
(``runner.bounded_run``), hosts in a fan-out stop at their next step boundary (fabricctl's fanout), LIO's
configuration is saved for the boot (``storage.lio.kernel``: a withdrawn ACL must not come back). A second
SIGINT during that clean-up would raise a second KeyboardInterrupt inside it and cut it short. It comes more
often than a second key press: ``timeout -s INT`` (a job's time limit, a test) and a terminal send SIGINT
to the command and to its whole process group, so the command can receive it twice within microseconds,
and the second one lands after the first was handled when the machine is loaded.

``first_only()`` is the ``with`` block of a command's ``main``: inside it, the first SIGINT raises
KeyboardInterrupt as Python's default handler does, and every later one is counted (``ignored``) and
otherwise ignored until the block ends. SIGTERM and SIGKILL still end the process at once. Outside the main
thread, or when SIGINT is not Python's default handler (ignored by the parent, or set by an embedding
program), the block changes nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class Interrupts:
    received: int = 0  # SIGINTs received inside the block

    @property
    def ignored(self) -> int:
        """SIGINTs after the first, which did nothing."""
        return max(0, self.received - 1)


@contextlib.contextmanager
def first_only() -> Iterator[Interrupts]:
    """Inside the block, only the first SIGINT raises KeyboardInterrupt (see the module's doc)."""
    seen = Interrupts()
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield seen
        return

    def handler(_signum, _frame) -> None:
        seen.received += 1
        if seen.received == 1:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, previous)
