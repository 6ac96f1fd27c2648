"""fabricctl.zvols.destroy (issue 26, item 7): a volume goes with exactly the snapshots its command checked; one
taken since is never destroyed unseen (the volume is then kept, and the error names the snapshot)."""

from __future__ import annotations

import types

import pytest
from fabric_core.base.errors import UnsafeOperation
from fabric_core.storage import lzc
from support import AnsweringRunner

from fabricctl import zvols

VOL = "tank/checkpoints/llama"
CHECKED = [f"{VOL}@step-100", f"{VOL}@step-200"]
CHILDREN = (1, "", f"cannot destroy '{VOL}': volume has children\nuse '-r' to destroy the following datasets:\n"
                  f"{VOL}@by-hand\n")


@pytest.fixture
def node(monkeypatch):
    destroyed: list = []
    monkeypatch.setattr(lzc, "_destroy_snapshots", lambda names: destroyed.append(list(names)))

    def make(answers: dict, listing: list[str] = ()):
        runner = AnsweringRunner(answers, default=(0, "", ""))
        monkeypatch.setattr(zvols.versions, "list_all_snapshots",
                            lambda _runner, root: [{"name": n} for n in listing if n.startswith(root + "@")])
        return types.SimpleNamespace(local=runner, dry_run=False), destroyed
    return make


def test_the_checked_snapshots_then_the_volume_without_r(node):
    ctx, destroyed = node({})
    zvols.destroy(ctx, VOL, CHECKED)
    assert destroyed == [CHECKED]
    zfs = [list(a) for a in ctx.local.seen if a[0] == "zfs"]
    assert zfs == [["zfs", "destroy", VOL]]  # never -r


def test_a_snapshot_taken_after_the_check_keeps_the_volume_and_is_named(node):
    ctx, destroyed = node({("zfs", "destroy"): CHILDREN}, listing=[f"{VOL}@by-hand"])
    with pytest.raises(UnsafeOperation) as err:
        zvols.destroy(ctx, VOL, CHECKED)
    assert destroyed == [CHECKED]  # what was checked went; the new one did not
    assert f"{VOL}@by-hand" in err.value.problem and "kept" in err.value.problem
    assert "-r" not in [w for a in ctx.local.seen for w in a]


def test_snapshots_of_another_volume_are_refused_before_anything(node):
    ctx, destroyed = node({})
    with pytest.raises(UnsafeOperation, match="not snapshots of"):
        zvols.destroy(ctx, VOL, [*CHECKED, "tank/checkpoints/other@step-1"])
    assert destroyed == [] and ctx.local.seen == []


def test_a_volume_without_snapshots_is_destroyed_alone(node):
    ctx, destroyed = node({})
    zvols.destroy(ctx, VOL, [])
    assert destroyed == [] and [list(a) for a in ctx.local.seen if a[0] == "zfs"] == [["zfs", "destroy", VOL]]
