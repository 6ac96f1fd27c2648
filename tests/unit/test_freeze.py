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
