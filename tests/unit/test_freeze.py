"""fabric_core.freeze: the writer of a checkpoint is frozen only under a safety timer on its own host, thawed
whatever happens, and a snapshot that took as long as the timer is discarded."""

from __future__ import annotations

import pytest
from fabric_core import freeze
from fabric_core.errors import UserError
from support import AnsweringRunner

MP = "/checkpoints/demo-job"
UNIT = "fabric-thaw-checkpoints-demo-job"


def writer(thaw=(0, "", "")) -> AnsweringRunner:
    return AnsweringRunner({("fsfreeze", "-u"): thaw}, default=(0, "", ""))


def ticking(*times):
    values = iter(times)
    return lambda: next(values)


def test_the_timer_is_set_before_the_freeze_and_stopped_after_the_thaw():
    host, taken = writer(), []
    result, window = freeze.snapshot_frozen(host, MP, lambda: taken.append(1) or "snap", limit=30,
                                            discard=lambda: pytest.fail("discarded"), clock=ticking(100.0, 100.4))
    assert (result, taken, round(window, 1)) == ("snap", [1], 0.4)
    argvs = [list(a) for a in host.seen]
    arm = argvs.index(freeze.arm_argv(MP, 30))
    assert argvs.index(["fsfreeze", "-f", MP]) > arm > argvs.index(["sync", "-f", MP])
    assert argvs[-1] == ["systemctl", "stop", f"{UNIT}.timer", f"{UNIT}.service"]
    assert argvs.index(["fsfreeze", "-u", MP]) < len(argvs) - 1
    assert freeze.arm_argv(MP, 30)[:3] == ["systemd-run", f"--unit={UNIT}", "--on-active=30s"]
    assert freeze.arm_argv(MP, 30)[-3:] == ["fsfreeze", "-u", MP]
    # a leftover timer of a killed run is stopped before the new one is set
    assert argvs[:arm].count(["systemctl", "stop", f"{UNIT}.timer", f"{UNIT}.service"]) == 1


def test_a_failed_snapshot_still_thaws_and_stops_the_timer():
    host = writer()

    def fail():
        raise RuntimeError("snapshot failed")

    with pytest.raises(RuntimeError, match="snapshot failed"):
        freeze.snapshot_frozen(host, MP, fail, limit=30, discard=lambda: None, clock=ticking(0.0, 1.0))
    argvs = [list(a) for a in host.seen]
    assert ["fsfreeze", "-u", MP] in argvs and argvs[-1][:2] == ["systemctl", "stop"]


def test_a_snapshot_as_slow_as_the_timer_is_discarded():
    host, discarded = writer(thaw=(1, "", "fsfreeze: /checkpoints/demo-job: thaw failed: Invalid argument")), []
    with pytest.raises(freeze.ThawedEarly) as err:
        freeze.snapshot_frozen(host, MP, lambda: "snap", limit=5, discard=lambda: discarded.append(1),
                               clock=ticking(0.0, 5.2))
    assert discarded == [1] and "discarded" in err.value.problem and "thaw_after_seconds" in err.value.fix


def test_a_thaw_that_fails_otherwise_says_what_to_run():
    host = writer(thaw=(1, "", "fsfreeze: /checkpoints/demo-job: Input/output error"))
    with pytest.raises(UserError) as err:
        freeze.snapshot_frozen(host, MP, lambda: None, limit=30, discard=lambda: None, clock=ticking(0.0, 0.1))
    assert f"fsfreeze -u {MP}" in err.value.fix and f"{UNIT}.timer" in err.value.fix


def test_the_bound_is_checked_and_a_dry_run_only_plans():
    with pytest.raises(UserError, match="5-3600"):
        freeze.arm(writer(), MP, 2)
    dry = AnsweringRunner({}, dry_run=True, default=None)
    assert freeze.arm(dry, MP, 30) == UNIT and dry.seen == [] and list(dry.planned[-1]) == freeze.arm_argv(MP, 30)


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
