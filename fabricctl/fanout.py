"""Run one function per host in parallel, collect each host's outcome, show progress per host.

``run_on_hosts(hosts, fn, parallel=16, progress=HostProgress(...))`` calls ``fn(host)`` in a thread
pool. A host's failure never stops the others; ``FanoutResult.raise_for_partial(what)`` then turns
failures into one error naming each failed host and why.

Ctrl-C: no new host is started; hosts already running stop at their next step boundary (the next
``HostProgress.update`` or ``checkpoint()`` call raises ``Interrupted`` in that worker), so no host is
left in the middle of a step; then KeyboardInterrupt is raised in the caller.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from fabric_core.base.errors import FabricError, UserError

from .errors import PartialFailure

OK, FAILED, INTERRUPTED, SKIPPED = "ok", "failed", "interrupted", "skipped"

_worker = threading.local()  # .stop: the threading.Event of the fan-out this worker thread belongs to


class Interrupted(KeyboardInterrupt):
    """Raised inside a worker at a step boundary after Ctrl-C; the host's outcome is 'interrupted'."""


def checkpoint() -> None:
    """Call between steps in a per-host function: raises ``Interrupted`` once Ctrl-C was pressed.

    Outside a fan-out worker it does nothing. ``HostProgress.update`` calls it too.
    """
    stop = getattr(_worker, "stop", None)
    if stop is not None and stop.is_set():
        raise Interrupted()


def host_name(host) -> str:
    return getattr(host, "name", None) or str(host)


def _one_line(error: BaseException) -> str:
    text = getattr(error, "problem", None) or str(error) or type(error).__name__
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


# --------------------------------------------------------------------------------------------
# results


@dataclass
class HostOutcome:
    host: Any
    status: str  # ok | failed | interrupted | skipped
    value: Any = None
    error: BaseException | None = None
    seconds: float | None = None  # the host's wall time, once it started

    @property
    def name(self) -> str:
        return host_name(self.host)

    @property
    def ok(self) -> bool:
        return self.status == OK


@dataclass
class FanoutResult:
    outcomes: list[HostOutcome] = field(default_factory=list)  # in the order the hosts were given
    interrupted: bool = False

    @property
    def ok(self) -> list[HostOutcome]:
        return [o for o in self.outcomes if o.status == OK]

    @property
    def failed(self) -> list[HostOutcome]:
        return [o for o in self.outcomes if o.status == FAILED]

    @property
    def not_done(self) -> list[HostOutcome]:
        """Hosts that failed, were interrupted, or were never started."""
        return [o for o in self.outcomes if o.status != OK]

    @property
    def values(self) -> dict[str, Any]:
        return {o.name: o.value for o in self.outcomes if o.status == OK}

    @property
    def all_ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    @property
    def ok_names(self) -> list[str]:
        return [o.name for o in self.ok]

    def to_dict(self) -> dict:
        """Host -> {status, result} (or {status, error}), and ``seconds`` for a host that started: the ``hosts`` of
        a command's JSON."""
        out = {}
        for o in self.outcomes:
            item: dict = {"status": o.status}
            if o.seconds is not None:
                item["seconds"] = o.seconds
            if o.ok:
                item["result"] = o.value
            elif o.error is not None:
                item["error"] = str(o.error)
            out[o.name] = item
        return out

    def raise_for_partial(self, what: str, fix: str | None = None) -> None:
        """Raise if any host failed; return quietly when every host succeeded.

        * every host failed with the same user error (same type and problem, e.g. a version that
          does not exist): that error itself (exit 1, nothing was changed on any host);
        * otherwise ``PartialFailure`` (exit 3) naming each failed host and why, and which hosts
          succeeded. ``fix`` replaces the generic advice.
        """
        failed = [o for o in self.outcomes if o.status != OK]
        if not failed:
            return
        errors = [o.error for o in failed]
        if len(failed) == len(self.outcomes) and all(isinstance(e, UserError) for e in errors):
            first = errors[0]
            if all(type(e) is type(first) and e.problem == first.problem for e in errors):
                raise first
        total = len(self.outcomes)
        lines = [f"{what} failed on {len(failed)} of {total} host{'s' if total != 1 else ''}"
                 + (f" (succeeded on {', '.join(o.name for o in self.ok)})" if self.ok else "") + ":"]
        for o in failed:
            if o.status == FAILED:
                err = o.error
                prefix = "" if isinstance(err, FabricError) else "unexpected error: "
                detail = str(err) if isinstance(err, FabricError) else repr(err)
                body = detail.strip().splitlines() or [type(err).__name__]
                lines.append(f"  {o.name}: {prefix}{body[0]}")
                lines.extend(f"    {line.strip()}" for line in body[1:])
            else:
                lines.append(f"  {o.name}: {o.status} (Ctrl-C)")
        names = ",".join(o.name for o in failed)
        err = PartialFailure("\n".join(lines), fix or (
            f"fix each host's problem (see its fix above), then run the command again for the hosts that "
            f"did not finish ({names})"))
        err.result = self  # type: ignore[attr-defined]
        raise err


# --------------------------------------------------------------------------------------------
# progress


class HostProgress:
    """One status line per host on stderr: redrawn in place on a terminal, appended lines otherwise.

    Thread-safe. ``update(host, step)`` from the per-host function marks a step boundary (and
    raises ``Interrupted`` there after Ctrl-C, see module doc); run_on_hosts sets "done" and
    "FAILED: ..." itself.
    """

    def __init__(self, hosts: Iterable, *, title: str = "", stream: TextIO | None = None, tty: bool | None = None,
                 width: int = 120):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.title = title
        self.width = width
        self.names = [host_name(h) for h in hosts]
        self.steps: dict[str, str] = dict.fromkeys(self.names, "waiting")
        self._lock = threading.Lock()
        self._drawn = 0  # lines drawn by the last redraw (TTY)
        if self.tty:
            self._redraw()
        elif title:
            self._write(f"{title}\n")

    def update(self, host, step: str) -> None:
        checkpoint()
        self.set(host, step)

    def set(self, host, step: str) -> None:
        """Set a host's line without the Ctrl-C check (for final states)."""
        name = host_name(host)
        with self._lock:
            if name not in self.steps:
                self.names.append(name)
            if self.steps.get(name) == step:
                return
            self.steps[name] = step
            if self.tty:
                self._redraw()
            else:
                self._write(f"{name}: {step}\n")

    def done(self, host, note: str = "done") -> None:
        self.set(host, note)

    def failed(self, host, error: BaseException | str) -> None:
        text = error if isinstance(error, str) else _one_line(error)
        self.set(host, f"FAILED: {text}")

    def _line(self, name: str) -> str:
        pad = max(len(n) for n in self.names) if self.names else 0
        text = f"  {name.ljust(pad)}  {self.steps[name]}"
        return text if len(text) <= self.width else text[: self.width - 1] + "…"

    def _redraw(self) -> None:
        out = []
        if self._drawn:
            out.append(f"\x1b[{self._drawn}A")  # cursor up to the first line we drew
        lines = ([self.title] if self.title else []) + [self._line(n) for n in self.names]
        out.extend(f"\r\x1b[2K{line}\n" for line in lines)
        self._drawn = len(lines)
        self._write("".join(out))

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed stderr must not fail the operation

    def close(self) -> None:
        pass  # lines stay on screen; kept for symmetry with ProgressBar

    def __enter__(self) -> HostProgress:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# the fan-out


def _interrupted(result: FanoutResult, progress: HostProgress | None, exc: KeyboardInterrupt) -> KeyboardInterrupt:
    """The fan-out's KeyboardInterrupt after Ctrl-C: the result marked interrupted and carried on the exception
    (``exc.fanout_result``), hosts never started shown as such."""
    result.interrupted = True
    if progress is not None:
        for o in result.outcomes:
            if o.status == SKIPPED:
                progress.set(o.host, "not started (interrupted)")
    exc.fanout_result = result  # type: ignore[attr-defined]
    return exc


def run_on_hosts(hosts: Iterable, fn: Callable[[Any], Any], *, parallel: int = 16,
                 progress: HostProgress | None = None, poll: float = 0.2) -> FanoutResult:
    """Call ``fn(host)`` for every host, at most ``parallel`` at a time; never raises for a host's error.

    Returns the outcomes in the order of ``hosts``. KeyboardInterrupt (Ctrl-C) in the caller: no
    new host starts, running hosts stop at their next step boundary, then KeyboardInterrupt is
    re-raised (the outcomes so far are on ``exc.fanout_result``).
    """
    hosts = list(hosts)
    if parallel < 1:
        raise UserError(f"parallel must be at least 1, got {parallel}", "use --parallel 1 or more")
    outcomes = [HostOutcome(h, SKIPPED) for h in hosts]
    result = FanoutResult(outcomes)
    stop = threading.Event()

    def work(index: int):
        host = hosts[index]
        _worker.stop = stop
        started = None

        def took() -> float | None:
            return None if started is None else round(time.monotonic() - started, 2)

        try:
            if stop.is_set():
                raise Interrupted()
            if progress is not None:
                progress.set(host, "starting")
            started = time.monotonic()
            value = fn(host)
        except Interrupted as exc:
            outcomes[index] = HostOutcome(host, INTERRUPTED, error=exc, seconds=took())
            if progress is not None:
                progress.set(host, "interrupted")
        except KeyboardInterrupt as exc:  # a plain one raised inside fn: treat as the user's Ctrl-C
            stop.set()
            outcomes[index] = HostOutcome(host, INTERRUPTED, error=exc, seconds=took())
            if progress is not None:
                progress.set(host, "interrupted")
        except BaseException as exc:  # noqa: BLE001 - every host's error is reported, none stops the others
            outcomes[index] = HostOutcome(host, FAILED, error=exc, seconds=took())
            if progress is not None:
                progress.failed(host, exc)
        else:
            outcomes[index] = HostOutcome(host, OK, value=value, seconds=took())
            if progress is not None:
                progress.done(host, f"done in {outcomes[index].seconds:.1f} s")
        finally:
            _worker.stop = None

    # N threads, each taking the next host until none is left or Ctrl-C was pressed (``take``, under a lock). Not a
    # ThreadPoolExecutor: a KeyboardInterrupt landing inside its submit() leaves a started worker it never joins.
    # After Ctrl-C the main thread waits for the hosts taken and not finished (``in_flight``), not for the threads:
    # a Thread.join() that the KeyboardInterrupt interrupted leaves that thread reporting is_alive() False while it
    # still runs (CPython 3.11, tests/unit/test_fabricctl_fanout.py), so joining "the threads alive" could skip the
    # very host that was mid-step. A thread that starts later finds ``stop`` set and takes nothing.
    taken = iter(range(len(hosts)))
    lock = threading.Condition()
    in_flight: set[int] = set()

    def take() -> int | None:
        with lock:
            index = None if stop.is_set() else next(taken, None)
            if index is not None:
                in_flight.add(index)
            return index

    def worker() -> None:
        while (index := take()) is not None:
            try:
                work(index)
            finally:
                with lock:
                    in_flight.discard(index)
                    lock.notify_all()

    threads = [threading.Thread(target=worker, name=f"fabricctl-host-{n}", daemon=True)
               for n in range(min(parallel, len(hosts)))]
    try:
        for thread in threads:
            thread.start()
        while alive := [t for t in threads if t.is_alive()]:
            alive[0].join(poll)  # a timeout so that the main thread notices Ctrl-C promptly on every platform
    except KeyboardInterrupt as exc:
        stop.set()
        with lock:  # running hosts stop at their next step boundary
            while in_flight:
                lock.wait()
        _interrupted(result, progress, exc)
        raise
    if stop.is_set():  # a host's function raised KeyboardInterrupt itself
        raise _interrupted(result, progress, KeyboardInterrupt())
    return result
