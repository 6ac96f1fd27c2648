# ruff: noqa: I001  (support must be imported first: it puts module_utils on the import path)
"""fabric_core.base.runner's bounds on a local command, with real processes (no mocks): a command that runs too
long (sleep, and one whose child keeps running) or floods a stream (yes) is killed with its process group and
fails with CommandBounded naming the bound, whatever ``check`` says; the next command runs normally."""

from __future__ import annotations

import os
import threading

import pytest
import support  # noqa: F401
from support import ends

from fabric_core.base import runner as core_runner
from fabric_core.base.errors import CommandBounded, CommandError
from fabric_core.base.runner import LocalRunner, bounded_run




def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_command_within_its_bounds_runs_as_before():
    r = LocalRunner(timeout=30, output_cap=1 << 20)
    assert r.run(["sh", "-c", "echo out; echo err >&2"]).stdout == "out\n"
    res = r.run(["sh", "-c", "cat; echo err >&2; exit 3"], data="in\n", check=False)
    assert (res.rc, res.stdout, res.stderr) == (3, "in\n", "err\n")
    assert r.run(["no-such-command-here"], check=False).rc == 127
    with pytest.raises(CommandError) as exc:
        r.run(["sh", "-c", "exit 4"])
    assert exc.value.rc == 4 and not isinstance(exc.value, CommandBounded)


@pytest.mark.parametrize("check", [True, False])
def test_a_command_that_runs_too_long_is_killed_with_its_children(tmp_path, check):
    pidfile = tmp_path / "child.pid"
    r = LocalRunner(timeout=1.0)
    _value, err = ends(lambda: r.run(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], check=check))
    assert isinstance(err, CommandBounded), err
    assert "ran longer than 1 s; killed" in str(err) and "fix:" in str(err) and err.rc == -9
    child = int(pidfile.read_text())
    _v, _e = ends(lambda: [None for _ in iter(lambda: alive(child), False)])  # reaped by init once killed
    assert not alive(child)
    assert r.run(["echo", "next"]).stdout == "next\n"


@pytest.mark.parametrize("argv, stream", [(["yes"], "stdout"), (["sh", "-c", "yes >&2"], "stderr")])
def test_a_command_that_floods_is_killed_at_the_cap_and_only_the_cap_is_kept(argv, stream):
    r = LocalRunner(timeout=60, output_cap=256 << 10)
    _value, err = ends(lambda: r.run(argv, check=False))
    assert isinstance(err, CommandBounded), err
    assert f"printed more than 256 KiB on {stream} (the rest was not kept); killed" in str(err)
    assert len(getattr(err, stream)) <= 4096  # what the error carries: the start of the flood, not the flood
    assert "its output began: 'y\\ny\\n" in str(err)


def test_a_remote_name_and_a_fix_given_are_in_the_error():
    with pytest.raises(CommandBounded) as exc:
        bounded_run(["sleep", "5"], timeout=0.5, where="storage2", fix="check storage2")
    assert "`sleep 5` on storage2 ran longer than 0.5 s; killed" in str(exc.value)
    assert str(exc.value).endswith("fix: check storage2")


def test_the_bounds_are_named_once_and_are_the_runners_defaults():
    r = LocalRunner()
    assert (r.timeout, r.output_cap) == (core_runner.LOCAL_TIMEOUT, core_runner.OUTPUT_CAP)
    assert core_runner.STALL_SECONDS > core_runner.SSH_ALIVE_INTERVAL * core_runner.SSH_ALIVE_COUNT > 0


# ---- a stream between nodes: bounded by progress, not by a total time


def test_a_stream_whose_sender_goes_silent_stalls_with_what_moved_before():
    from fabric_core.services.replicate import Pump, Stalled

    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    os.write(w1, b"x" * 1000)  # then nothing, the writer still open: a silent sender
    try:
        _value, err = ends(lambda: Pump(stall=1.0).run(r1, w2))
        assert isinstance(err, Stalled), err
        assert "no byte moved for 1 s: the sending side is silent (1000 bytes moved before)" in str(err)
        assert "fix:" in str(err) and os.read(r2, 4096) == b"x" * 1000
    finally:
        for fd in (r1, w1, r2, w2):
            os.close(fd)


def test_a_stream_whose_receiver_stops_reading_stalls():
    from fabric_core.services.replicate import Pump, Stalled

    r1, w1 = os.pipe()
    r2, w2 = os.pipe()  # nobody reads r2: it fills, then the pump cannot move a byte

    def sender():
        try:
            while True:
                os.write(w1, b"y" * 65536)
        except OSError:
            return

    threading.Thread(target=sender, daemon=True).start()
    try:
        _value, err = ends(lambda: Pump(stall=1.0).run(r1, w2))
        assert isinstance(err, Stalled), err
        assert "the receiving side does not read" in str(err)
    finally:
        for fd in (r1, w1, r2, w2):
            os.close(fd)


def test_a_stream_that_keeps_moving_is_never_cut_however_long_it_takes():
    """A slow but steady sender (a byte every 0.2 s for longer than the stall bound) completes."""
    from fabric_core.services.replicate import Pump

    r1, w1 = os.pipe()
    r2, w2 = os.pipe()

    def sender():
        for _ in range(10):
            os.write(w1, b"z")
            threading.Event().wait(0.2)
        os.close(w1)

    threading.Thread(target=sender, daemon=True).start()
    try:
        value, err = ends(lambda: Pump(stall=1.0).run(r1, w2))
        assert err is None and value == 10 and os.read(r2, 100) == b"z" * 10
    finally:
        for fd in (r1, r2, w2):
            os.close(fd)
