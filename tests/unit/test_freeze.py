"""fabric_core.node.freeze: the writer of a checkpoint is frozen only under a safety timer on its own host, thawed
whatever happens, and a snapshot that took as long as the timer is discarded."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
from fabric_core.base.errors import CommandError, UserError
from fabric_core.node import freeze
from support import AnsweringRunner

MP = "/checkpoints/demo-job"
UNIT = "fabric-thaw-checkpoints-demo-job"


FINDMNT = ("findmnt", "-n", "-r", "-o", "SOURCE,FSTYPE,OPTIONS", "--mountpoint", MP)
RW = (0, "/dev/sdb ext4 rw,nodev,nosuid,relatime\n", "")


def writer(thaw=(0, "", ""), freeze=(0, "", ""), recover=(0, "", ""), mounted=RW) -> AnsweringRunner:
    """A writer answering the freeze, the thaw and arming's recovery (under the lock: ``flock ... LOCK``), with its
    volume mounted (read-write by default)."""
    lock = ("flock", "-w", str(freeze_mod.LOCK_WAIT), "-E", str(freeze_mod.BUSY), freeze_mod.lock_path(MP))
    return AnsweringRunner({(*lock, "fsfreeze", "-u"): thaw, (*lock, "sh", "-c", freeze_mod.FREEZE): freeze,
                            (*lock, "sh", "-c", freeze_mod.RECOVER): recover, FINDMNT: mounted},
                           default=(0, "", ""))


freeze_mod = freeze
EINVAL = (1, "", f"fsfreeze: {MP}: thaw failed: Invalid argument")
STOP = ["systemctl", "stop", f"{UNIT}.timer", f"{UNIT}.service"]


def ticking(start, end):
    """The clock of a snapshot from ``start`` to ``end`` (the sync before the timer takes no time): read when the
    freeze is asked for, around the writer's sync, and after the thaw."""
    values = iter((start, start, start, end))
    return lambda: next(values)


def steps(host) -> list[str]:
    """The writer's commands as named steps (the runner's recorded argv)."""
    names = {tuple(freeze.recover_argv(MP)): "recover", tuple(freeze.arm_argv(MP, 30)): "arm",
             tuple(freeze.arm_argv(MP, 5)): "arm", tuple(freeze.freeze_argv(MP)): "freeze",
             tuple(freeze.thaw_argv(MP)): "thaw", ("sync", "-f", MP): "sync", tuple(STOP): "disarm",
             FINDMNT: "check"}
    return [names.get(tuple(a), " ".join(a)) for a in host.seen]


def test_the_timer_is_set_before_the_freeze_and_stopped_after_the_thaw():
    host, taken = writer(), []
    result, window = freeze.snapshot_frozen(host, MP, lambda: taken.append(1) or "snap", limit=30,
                                            discard=lambda: pytest.fail("discarded"), clock=ticking(100.0, 100.4))
    assert (result, taken, round(window, 1)) == ("snap", [1], 0.4)
    # a leftover of a killed run is thawed and cleared under the lock before the new timer is set
    assert steps(host) == ["check", "sync", "recover", "arm", "freeze", "thaw", "disarm"]
    assert freeze.arm_argv(MP, 30)[:3] == ["systemd-run", f"--unit={UNIT}", "--on-active=30s"]
    assert freeze.arm_argv(MP, 30)[-5:] == [freeze.WATCHDOG, "fabric-thaw", MP, freeze.lock_path(MP),
                                            str(freeze.GIVE_UP)]
    # the freeze holds the lock while it runs, and starts only while its timer waits
    assert freeze.freeze_argv(MP)[:6] == ["flock", "-w", "10", "-E", "75", f"/run/{UNIT}.lock"]
    assert 'SubState "$1.timer"' in freeze.FREEZE and freeze.freeze_argv(MP)[-2:] == [UNIT, MP]


def test_the_watchdog_command_has_nothing_systemd_would_expand():
    """systemd expands ${VAR}, $$ and %-specifiers in a service's command line (systemd-run's
    --expand-environment, on by default since systemd 254): the watchdog's script must reach sh as written."""
    for word in freeze.arm_argv(MP, 30)[freeze.arm_argv(MP, 30).index("sh"):]:
        assert "${" not in word and "$$" not in word and "%" not in word, word


def test_a_failed_snapshot_still_thaws_and_stops_the_timer():
    host = writer()

    def fail():
        raise RuntimeError("snapshot failed")

    with pytest.raises(RuntimeError, match="snapshot failed"):
        freeze.snapshot_frozen(host, MP, fail, limit=30, discard=lambda: None, clock=ticking(0.0, 1.0))
    assert steps(host) == ["check", "sync", "recover", "arm", "freeze", "thaw", "disarm"]


def test_a_freeze_that_failed_on_this_side_is_still_thawed_there():
    """fabricctl's freeze fails (a timeout of its own, a refused late freeze): the freeze may land on the writer
    anyway, so the thaw runs all the same; no snapshot is taken."""
    host = writer(freeze=(freeze.LATE, "", f"the safety timer {UNIT}.timer is elapsed, not waiting: not freezing"))
    with pytest.raises(CommandError, match="not waiting"):
        freeze.snapshot_frozen(host, MP, lambda: pytest.fail("snapshot taken"), limit=30, discard=lambda: None,
                               clock=ticking(0.0, 40.0))
    assert steps(host) == ["check", "sync", "recover", "arm", "freeze", "thaw", "disarm"]


def test_a_freeze_still_in_flight_keeps_its_timer():
    """The thaw finds the lock taken (the freeze has not returned on the writer): the timer is not stopped (its
    watchdog thaws the freeze once it lands) and the error says so."""
    host = writer(thaw=(freeze.BUSY, "", ""), freeze=(1, "", "Timeout"))
    with pytest.raises(freeze.FreezeInFlight) as err:
        freeze.snapshot_frozen(host, MP, lambda: pytest.fail("snapshot taken"), limit=30, discard=lambda: None,
                               clock=ticking(0.0, 12.0))
    assert steps(host) == ["check", "sync", "recover", "arm", "freeze", "thaw"]  # no disarm
    assert f"{UNIT}.timer" in err.value.fix


def test_a_writer_lost_at_the_thaw_keeps_its_timer():
    class Lost(Exception):
        pass

    def lost(_argv):
        raise Lost("connection lost")

    host = writer(thaw=lost)
    with pytest.raises(Lost):
        freeze.snapshot_frozen(host, MP, lambda: "snap", limit=30, discard=lambda: None, clock=ticking(0.0, 1.0))
    assert steps(host) == ["check", "sync", "recover", "arm", "freeze", "thaw"]


def test_a_snapshot_as_slow_as_the_timer_is_discarded():
    host, discarded = writer(thaw=EINVAL), []
    with pytest.raises(freeze.ThawedEarly) as err:
        freeze.snapshot_frozen(host, MP, lambda: "snap", limit=5, discard=lambda: discarded.append(1),
                               clock=ticking(0.0, 5.2))
    assert discarded == [1] and "discarded" in err.value.problem and "thaw_after_seconds" in err.value.fix
    assert steps(host)[-1] == "disarm"  # nothing frozen, nothing in flight: the timer is done


def test_the_window_counts_from_before_the_timer_was_set():
    """The clock is read before the timer is armed: a window shorter than the limit proves the timer (which
    started later) has not fired."""
    host = writer()

    def clock():  # every command on the writer takes a second
        return float(len(host.seen))

    _result, window = freeze.snapshot_frozen(host, MP, lambda: None, limit=30, discard=lambda: None, clock=clock)
    assert steps(host) == ["check", "sync", "recover", "arm", "freeze", "thaw", "disarm"]
    # the check and the sync (2 s) are before the timer was set and not counted; from recover on, all is
    assert window == 5.0


def test_a_writer_counts_what_passed_before_its_timer_from_the_callers_request():
    """The agent's freeze counts from when its process started (``since``): what the caller's window must not
    count, as the timer was set after it."""
    host = writer()
    lead = freeze.Here(host, MP, clock=lambda: 12.5).freeze(30, since=10.0)
    assert lead == 2.5 and steps(host) == ["check", "sync", "recover", "arm", "freeze"]


@pytest.mark.parametrize("mounted", [(1, "", ""), (0, "/dev/sdb ext4 ro,noload\n", "")])
def test_a_writer_not_mounted_read_write_is_refused_and_nothing_is_set_or_thawed(mounted):
    host = writer(mounted=mounted)
    with pytest.raises(freeze.FreezeRefused, match="not mounted read-write"):
        freeze.snapshot_frozen(host, MP, lambda: pytest.fail("snapshot taken"), limit=30, discard=lambda: None,
                               clock=ticking(0.0, 0.1))
    assert steps(host) == ["check"]


def test_a_thaw_that_fails_otherwise_says_what_to_run_and_keeps_the_timer():
    host = writer(thaw=(1, "", "fsfreeze: /checkpoints/demo-job: Input/output error"))
    with pytest.raises(UserError) as err:
        freeze.snapshot_frozen(host, MP, lambda: None, limit=30, discard=lambda: None, clock=ticking(0.0, 0.1))
    assert f"fsfreeze -u {MP}" in err.value.fix and f"{UNIT}.timer" in err.value.fix
    assert "disarm" not in steps(host)


def test_an_earlier_freeze_still_in_flight_refuses_to_arm():
    host = writer(recover=(freeze.BUSY, "", ""))
    with pytest.raises(freeze.FreezeInFlight):
        freeze.snapshot_frozen(host, MP, lambda: None, limit=30, discard=lambda: None, clock=ticking(0.0, 0.1))
    assert steps(host) == ["check", "sync", "recover"]


def test_the_bound_is_checked_and_a_dry_run_only_plans():
    with pytest.raises(UserError, match="5-3600"):
        freeze.arm(writer(), MP, 2)
    dry = AnsweringRunner({}, dry_run=True, default=None)
    assert freeze.arm(dry, MP, 30) == UNIT and dry.seen == [] and list(dry.planned[-1]) == freeze.arm_argv(MP, 30)


# ---- the watchdog's script, run by sh with stand-ins for fsfreeze (a state file) and sleep, and the real flock -

FAKE_FSFREEZE = """#!/bin/sh
# fsfreeze -u MOUNT: thaws when the state file says frozen
if [ "$(cat "$FAKE_STATE")" = frozen ]; then echo thawed > "$FAKE_STATE"; exit 0; fi
echo "fsfreeze: $2: thaw failed: Invalid argument" >&2; exit 1
"""
FAKE_SLEEP = """#!/bin/sh
# the watchdog's second between tries: counted, and made short
echo slept >> "$FAKE_STATE.slept"; exec /bin/sleep 0.05
"""
needs_flock = pytest.mark.skipif(not shutil.which("flock"), reason="util-linux flock is not installed")


class Writer:
    """A stand-in writer in a temporary directory: its file system's state in a file, its lock file."""

    def __init__(self, root, state: str):
        root.mkdir(parents=True, exist_ok=True)
        bindir = root / "bin"
        bindir.mkdir()
        for name, text in (("fsfreeze", FAKE_FSFREEZE), ("sleep", FAKE_SLEEP)):
            (bindir / name).write_text(text)
            (bindir / name).chmod(0o755)
        self.state, self.lock = root / "state", str(root / "lock")
        self.state.write_text(state + "\n")
        self.env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_STATE": str(self.state)}

    def watchdog(self, tries: int = 2000) -> subprocess.Popen:
        return subprocess.Popen(["sh", "-c", freeze.WATCHDOG, "fabric-thaw", MP, self.lock, str(tries)], env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def sleeps(self) -> int:
        path = self.state.parent / "state.slept"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def locked(self) -> bool:
        return subprocess.run(["flock", "-n", self.lock, "true"], check=False).returncode != 0


def until(condition, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


@needs_flock
def test_the_watchdog_thaws_a_freeze_that_lands_after_it_fired(tmp_path):
    """The freeze is in flight (its lock held) when the watchdog fires, and lands later: the watchdog keeps
    trying under the lock and thaws it once it has landed, instead of finding nothing frozen and ending."""
    host = Writer(tmp_path, "thawed")
    go = tmp_path / "go"
    os.mkfifo(go)
    # the freeze: holds the lock until told to land, then marks the file system frozen (FIFREEZE returned)
    freezer = subprocess.Popen(["flock", host.lock, "sh", "-c", f"read x < {go}; echo frozen > {host.state}"])
    try:
        until(host.locked, "the freeze holds its lock")
        watchdog = host.watchdog()
        until(lambda: host.sleeps() >= 2, "the watchdog tried twice while the freeze was in flight")
        assert watchdog.poll() is None  # still there: it did not end on "not frozen"
        with open(go, "w") as fifo:
            fifo.write("land\n")
        out, err = watchdog.communicate(timeout=60)
    finally:
        freezer.kill()
        freezer.wait()
    assert watchdog.returncode == 0 and out.strip() == f"thawed {MP}", (out, err)
    assert host.state.read_text().strip() == "thawed"


@needs_flock
def test_the_watchdog_ends_when_nothing_is_frozen_and_nothing_in_flight(tmp_path):
    for state, said in (("thawed", f"{MP} is not frozen"), ("frozen", f"thawed {MP}")):
        host = Writer(tmp_path / state, state)
        out, err = host.watchdog().communicate(timeout=60)
        assert out.strip() == said and host.state.read_text().strip() == "thawed", (out, err)
        assert host.sleeps() == 0


@needs_flock
def test_the_watchdog_gives_up_after_its_tries_while_a_freeze_never_lands(tmp_path):
    host = Writer(tmp_path, "thawed")
    holder = subprocess.Popen(["flock", host.lock, "/bin/sleep", "60"])
    try:
        until(host.locked, "the stuck freeze holds its lock")
        watchdog = host.watchdog(tries=3)
        out, err = watchdog.communicate(timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert watchdog.returncode == 1 and "gave up" in err and host.sleeps() == 2, (out, err)


# ---- a writer's freeze state, read for `fabricctl status --writers` (recorded on the lab's gpu2) ----------

def _recorded(name: str) -> str:
    from pathlib import Path

    return (Path(__file__).parent / "data" / "freeze" / name).read_text()


def test_systemd_time_spans_parse():
    assert freeze.timespan("4min 9.385410s") == pytest.approx(249.38541)
    assert freeze.timespan("1h 2min 500ms") == pytest.approx(3720.5)
    assert freeze.timespan("infinity") is None and freeze.timespan("") is None


def test_an_armed_thaw_timer_is_a_frozen_checkpoint_volume_and_says_for_how_long():
    units = freeze.parse_show(_recorded("show.txt"))
    assert set(units) == {"fabric-thaw-checkpoints-demo-job.timer", "fabric-thaw-checkpoints-other.timer"}
    uptime = float(_recorded("uptime.txt").split()[0])
    states = freeze.freeze_states(units, [MP, "/checkpoints/other"], uptime)
    assert states == {MP: {"frozen_for": 3.4, "thaw_in": 26.6}}  # the other volume's timer is not armed


def test_tasks_waiting_for_a_frozen_file_system_are_listed():
    assert freeze.parse_blocked(_recorded("blocked.txt")) == [{"pid": 946, "comm": "dd"},
                                                               {"pid": 949, "comm": "touch"}]
    assert freeze.parse_blocked(_recorded("blocked-none.txt")) == []


def test_reading_a_writer_only_reads():
    runner = AnsweringRunner({("systemctl", "show"): (0, _recorded("show.txt"), ""),
                              ("cat", "/proc/uptime"): (0, _recorded("uptime.txt"), ""),
                              ("sh", "-c"): (0, _recorded("blocked.txt"), "")}, default=None)
    state = freeze.read_writer(runner, [MP])
    assert state["frozen"][MP]["frozen_for"] == 3.4 and len(state["blocked"]) == 2
    assert runner.executed == []  # no command of the three is marked mutating (a dry run would skip it)
    assert [list(a)[:2] for a in runner.seen] == [["systemctl", "show"], ["cat", "/proc/uptime"], ["sh", "-c"]]
