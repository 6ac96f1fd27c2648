"""fabric_core.node.binds' pure parts: findmnt's listing (stacked mounts, escaped paths), the paths and flags a bind
takes, df's answer; and its commands on a recorded mount table (a stacked path rebuilt as one read-only bind, a
failed read-only remount never leaving a writable bind)."""

from __future__ import annotations

import pytest
from fabric_core.base.errors import FabricError, InvalidName, NotFound, UserError
from fabric_core.base.runner import Runner
from fabric_core.node import binds

# `findmnt -rn -o TARGET,MAJ:MIN,FSROOT,VFS-OPTIONS --mountpoint /k/stage` with two mounts stacked there (util-linux
# 2.38: the bottom one first), and a path with a space
STACKED = ("/k/stage 8:32 / rw,relatime\n"
           "/k/stage 8:48 / rw,relatime\n")
SPACED = "/k/pods/a\\x20b/mount 8:16 / ro,nosuid,nodev,relatime\n"
DF = "     1B-blocks    Used    Avail Inodes IUsed IFree\n 67108864 1048576 66060288  16384    12 16372\n"


def test_findmnt_lists_every_layer_in_order_and_unescapes_paths():
    assert [(e.target, e.device) for e in binds.parse_findmnt(STACKED)] == [("/k/stage", "8:32"), ("/k/stage", "8:48")]
    spaced = binds.parse_findmnt(SPACED)[0]
    assert spaced.target == "/k/pods/a b/mount" and spaced.readonly and spaced.options[1:3] == ("nosuid", "nodev")


@pytest.mark.parametrize("path", ["", "relative", "/a/../b", "/a//b", "/a/", "/", "/a\nb", "/" + "x" * 4100, 42])
def test_paths_that_are_not_absolute_normalized_and_printable_are_refused(path):
    with pytest.raises(InvalidName):
        binds.validate_path(path)


def test_flags_are_the_per_mount_ones_of_a_read_only_bind():
    assert binds.check_flags(()) == ("nodev", "nosuid", "ro")
    assert binds.check_flags(["noexec", "ro"]) == ("nodev", "noexec", "nosuid", "ro")
    for bad in (["rw"], ["suid"], ["dev"], ["remount"], ["bind"], ["ro,rw"], ["uid=0"]):
        with pytest.raises(InvalidName):
            binds.check_flags(bad)


class Table(Runner):
    """A recorded mount table: findmnt answers from ``stacks`` (path -> [(device, root, options)]), mount --bind
    stacks the source's top layer, the read-only remount sets its flags (or fails), umount pops the top."""

    def __init__(self, stacks, *, remount_rc=0):
        super().__init__()
        self.stacks = {p: list(v) for p, v in stacks.items()}
        self.remount_rc = remount_rc
        self.seen = []

    def _run(self, argv, data):
        a = list(argv)
        self.seen.append(a)
        if a[0] == "findmnt":
            path = a[a.index("--mountpoint") + 1] if "--mountpoint" in a else None
            rows = [(p, layer) for p, layers in self.stacks.items() for layer in layers if path in (None, p)]
            text = "".join(f"{p} {d} {r} {','.join(o)}\n" for p, (d, r, o) in rows)
            return (0, text, "") if text else (1, "", "")
        if a[:2] == ["mount", "--bind"]:
            self.stacks.setdefault(a[3], []).append(self.stacks[a[2]][-1])
            return 0, "", ""
        if a[:2] == ["mount", "-o"]:
            if self.remount_rc:
                return self.remount_rc, "", "mount: permission denied\n"
            d, r, _o = self.stacks[a[3]][-1]
            self.stacks[a[3]][-1] = (d, r, tuple(a[2].split(",")[2:]))
            return 0, "", ""
        if a[0] == "umount":
            self.stacks[a[1]].pop()
            if not self.stacks[a[1]]:
                del self.stacks[a[1]]
            return 0, "", ""
        if a[0] in ("mkdir", "rmdir", "test"):
            return 0, "", ""
        if a[0] == "df":
            return 0, DF, ""
        raise AssertionError(a)


SOURCE = {"/datasets/x/v1": [("8:16", "/", ("ro", "nosuid", "nodev", "relatime"))]}


def test_a_path_with_stale_layers_becomes_one_read_only_bind_and_then_stays_as_it_is():
    table = Table({**SOURCE, "/k/stage": [("8:32", "/", ("rw",)), ("8:48", "/", ("rw",))]})
    out = binds.ensure_readonly_bind(table, "/datasets/x/v1", "/k/stage")
    assert out["changed"] and out["replaced"] == 2
    assert table.stacks["/k/stage"] == [("8:16", "/", ("nodev", "nosuid", "ro"))]
    assert binds.is_bind_of(table, "/datasets/x/v1", "/k/stage")
    before = len(table.seen)
    assert binds.ensure_readonly_bind(table, "/datasets/x/v1", "/k/stage") == {"changed": False, "commands": [],
                                                                                "replaced": 0}
    assert all(a[0] == "findmnt" for a in table.seen[before:])
    assert binds.binds_of(table, binds.mounted(table, "/datasets/x/v1")) == ["/k/stage"]


def test_a_bind_without_the_wanted_flag_is_rebuilt_with_it():
    table = Table({**SOURCE, "/k/pod": [("8:16", "/", ("ro", "nosuid", "nodev"))]})
    assert binds.ensure_readonly_bind(table, "/datasets/x/v1", "/k/pod", flags=["noexec"])["changed"]
    assert "noexec" in table.stacks["/k/pod"][0][2] and len(table.stacks["/k/pod"]) == 1


def test_a_failed_read_only_remount_never_leaves_a_writable_bind():
    table = Table(SOURCE, remount_rc=32)
    with pytest.raises(FabricError, match="read-only"):
        binds.ensure_readonly_bind(table, "/datasets/x/v1", "/k/pod")
    assert "/k/pod" not in table.stacks


def test_nothing_at_the_source_is_not_found_and_removing_nothing_changes_nothing():
    table = Table({})
    with pytest.raises(NotFound):
        binds.ensure_readonly_bind(table, "/datasets/x/v1", "/k/pod")
    assert binds.remove_bind(table, "/k/pod") == {"changed": False, "commands": []}


def test_usage_reads_dfs_bytes_and_inodes():
    assert binds.usage(Table(SOURCE), "/datasets/x/v1") == {
        "bytes": {"total": 67108864, "used": 1048576, "available": 66060288},
        "inodes": {"total": 16384, "used": 12, "available": 16372}}

    class Broken(Table):
        def _run(self, argv, data):
            return (1, "", "df: /x: No such file or directory\n") if argv[0] == "df" else super()._run(argv, data)
    with pytest.raises(UserError, match="No such file"):
        binds.usage(Broken(SOURCE), "/x")
