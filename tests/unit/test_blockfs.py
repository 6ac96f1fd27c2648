"""fabric_core.storage.blockfs: a blank volume gets its file system, the declared one is left alone, any
other signature is refused and nothing is written; dry runs plan the mkfs."""

from __future__ import annotations

import pytest
from fabric_core.base.errors import UserError
from fabric_core.base.runner import Runner
from fabric_core.storage import blockfs


class Scripted(Runner):
    """blkid answers from a table; everything is recorded."""

    def __init__(self, blkid: tuple[int, str], dry_run: bool = False):
        super().__init__(dry_run=dry_run)
        self.blkid = blkid
        self.calls: list = []

    def _run(self, argv, data):
        self.calls.append(list(argv))
        if argv[0] == "blkid":
            return self.blkid[0], self.blkid[1], ""
        return 0, "", ""


@pytest.fixture
def device(tmp_path):
    dev = tmp_path / "zd0"
    dev.write_text("")  # exists, as the zvol's node does once udev has run
    return str(dev)


def test_mkfs_options_are_one_rule_for_every_volume():
    assert blockfs.mkfs_argv("ext4", "/dev/zvol/tank/v", "welcome") == [
        "mkfs.ext4", "-q", "-m", "0", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0", "-L", "welcome",
        "/dev/zvol/tank/v"]
    assert blockfs.mkfs_argv("xfs", "/dev/x", "a-very-long-label") == ["mkfs.xfs", "-q", "-K", "-L", "a-very-long-",
                                                                      "/dev/x"]
    assert blockfs.mkfs_argv("ext4", "/dev/x")[-1] == "/dev/x" and "-L" not in blockfs.mkfs_argv("ext4", "/dev/x")
    with pytest.raises(UserError) as exc:
        blockfs.mkfs_argv("btrfs", "/dev/x")
    assert "ext4, xfs" in exc.value.fix


def test_blank_volume_gets_its_filesystem(device):
    runner = Scripted((2, ""))  # blkid -p exits 2: no signature at all
    out = blockfs.ensure_filesystem(runner, device, "ext4", label="welcome")
    assert out["changed"] and out["found"] is None
    assert runner.executed == [tuple(blockfs.mkfs_argv("ext4", device, "welcome"))]


def test_the_declared_filesystem_is_left_alone(device):
    runner = Scripted((0, "ext4\n"))
    out = blockfs.ensure_filesystem(runner, device, "ext4")
    assert out == {"changed": False, "found": "ext4", "command": []}
    assert runner.executed == []


def test_another_signature_is_refused_and_nothing_is_written(device):
    runner = Scripted((0, "xfs\n"))
    with pytest.raises(UserError) as exc:
        blockfs.ensure_filesystem(runner, device, "ext4")
    assert "carries xfs, not the declared ext4" in exc.value.problem and "never reformatted" in exc.value.problem
    assert "filesystem: xfs" in exc.value.fix
    assert runner.executed == [] and not any(c[0].startswith("mkfs") for c in runner.calls)


def test_dry_run_plans_the_mkfs_of_a_blank_or_planned_volume(device, tmp_path):
    blank = Scripted((2, ""), dry_run=True)
    assert blockfs.ensure_filesystem(blank, device, "xfs")["changed"]
    assert blank.planned == [tuple(blockfs.mkfs_argv("xfs", device))] and blank.executed == []
    planned = Scripted((2, ""), dry_run=True)
    out = blockfs.ensure_filesystem(planned, str(tmp_path / "not-yet"), "ext4", device_planned=True)
    assert out["changed"] and planned.calls == []  # nothing read from a device that does not exist yet
    assert planned.planned == [tuple(blockfs.mkfs_argv("ext4", str(tmp_path / "not-yet")))]
