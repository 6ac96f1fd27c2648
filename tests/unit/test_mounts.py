"""Mount units (fabric_core.node.mounts) and the fabric_mounts module, on a small simulated host: unit
files in a dict, the mount table in another; the commands are the ones the code runs on real
nodes (cat, install, systemctl, findmnt, grep, fuser, ps). The lab tests run the
same code against real systemd (tests/integration/test_iscsi_initiator.py)."""

from __future__ import annotations

import pytest
from fabric_core.base.errors import Busy, UserError
from fabric_core.base.runner import Runner
from fabric_core.node import mounts
from support import run_module

DEV = "/dev/disk/by-path/ip-10.77.0.11:3260-iscsi-iqn.2026-11.io.fabric.lab:storage1-exports-lun-{}"
UNITS = mounts.UNIT_DIR


class Host(Runner):
    """Just enough of a GPU node for the mount code: unit files, enablement, the mount table."""

    def __init__(self, files=None, mounted=None, users=None, dry_run=False):
        super().__init__(dry_run=dry_run)
        self.files = dict(files or {})      # path -> text
        self.loaded: dict = {}              # unit -> its file's text when systemd loaded it
        self.mounted = dict(mounted or {})  # mountpoint -> (source, fstype, options)
        self.users = dict(users or {})      # mountpoint -> [(pid, comm)]
        self.log: list = []

    @property
    def enabled(self) -> set:
        """Units wanted at boot: their links in remote-fs.target.wants (as `systemctl enable` makes them)."""
        wants = f"{UNITS}/{mounts.WANTED_BY}.wants/"
        return {path[len(wants):] for path in self.files if path.startswith(wants)}

    def _reload(self):
        """systemd reads every unit file it holds a copy of again (daemon-reload, and enable's own)."""
        self.loaded = {u: self.files[f"{UNITS}/{u}"] for u in self.loaded if f"{UNITS}/{u}" in self.files}

    def _where(self, unit):
        text = self.loaded.setdefault(unit, self.files.get(f"{UNITS}/{unit}", ""))  # systemd's copy
        get = {k: v for k, _, v in (line.partition("=") for line in text.splitlines())}
        return get.get("Where"), get.get("Type"), get.get("Options", "")

    def _run(self, argv, data):
        self.log.append(argv)
        cmd = argv[0]
        if cmd == "cat":
            return (0, self.files[argv[1]], "") if argv[1] in self.files else (1, "", "No such file")
        if cmd == "install":
            self.files[argv[-1]] = data
            return 0, "", ""
        if cmd == "readlink":
            return (0, self.files[argv[-1]] + "\n", "") if argv[-1] in self.files else (1, "", "")
        if cmd == "ln":
            self.files[argv[-1]] = argv[-2]
            return 0, "", ""
        if cmd == "grep":
            hits = [f"{path}:{line}" for path, text in sorted(self.files.items()) if path.endswith(".mount")
                    for line in text.splitlines() if line.startswith((mounts.OWNER_MARK, "What=", "Where="))]
            return (0, "\n".join(hits) + "\n", "") if hits else (1, "", "")
        if cmd == "findmnt":
            point = argv[-1]
            if point not in self.mounted:
                return 1, "", ""
            return 0, " ".join(self.mounted[point]) + "\n", ""
        if cmd == "fuser":
            return 0, " ".join(pid for pid, _ in self.users.get(argv[-1], [])), ""
        if cmd == "ps":
            pids = argv[-1].split(",")
            return 0, "".join(f"{pid} {comm}\n" for who in self.users.values() for pid, comm in who if pid in pids), ""
        if cmd == "systemctl":
            words = [a for a in argv[1:] if not a.startswith("--")]
            verb, unit = words[0], words[1] if len(words) > 1 else ""
            if verb == "is-enabled":
                return (0, "enabled\n", "") if unit in self.enabled else (1, "disabled\n", "")
            wants = f"{UNITS}/{mounts.WANTED_BY}.wants/{unit}"
            if verb == "enable":
                self.files[wants] = f"{UNITS}/{unit}"
                self._reload()
            elif verb == "disable":
                self.files.pop(wants, None)
            elif verb == "show":
                if f"{UNITS}/{unit}" not in self.files:
                    return 0, "LoadState=not-found\nNeedDaemonReload=no\n", ""
                stale = self.loaded.setdefault(unit, self.files[f"{UNITS}/{unit}"]) != self.files[f"{UNITS}/{unit}"]
                return 0, f"LoadState=loaded\nNeedDaemonReload={'yes' if stale else 'no'}\n", ""
            elif verb == "daemon-reload":
                self._reload()
            elif verb in ("start", "restart"):
                where, fstype, opts = self._where(unit)
                self.mounted[where] = ("/dev/sdb", fstype, opts.replace("_netdev", "").strip(","))
            elif verb == "stop":
                self.mounted.pop(self._where(unit)[0], None)
            return 0, "", ""
        if cmd == "test":
            return (0, "", "") if argv[2] in self.files or argv[1] == "-d" else (1, "", "")
        if cmd == "rm":
            self.files.pop(argv[-1], None)
            return 0, "", ""
        return 0, "", ""  # mkdir, rmdir, umount

    def mutations(self):
        return [a for a in self.log if a[0] in ("install", "rm", "umount", "ln")
                or (a[0] == "systemctl" and a[1] not in ("is-enabled", "show"))]


def want(name, owner_desc="Read-only dataset"):
    return {"device": DEV.format(0), "mountpoint": f"/datasets/{name}", "fstype": "ext4",
            "description": f"{owner_desc} {name}"}


def test_unit_text_marks_its_owner_and_is_read_only_on_the_network():
    text = mounts.unit_text(device=DEV.format(0), mountpoint="/datasets/a", fstype="xfs", readonly=True,
                            description="d", device_unit="dev-x.device", owner="iscsi_initiator")
    assert f"{mounts.OWNER_MARK}iscsi_initiator\n" in text
    assert "Options=ro,norecovery,nodev,nosuid,_netdev" in text
    with pytest.raises(UserError):
        mounts.unit_text(device="d", mountpoint="/m", fstype="ext4", readonly=True, description="d", owner="Bad Owner")


def test_reconcile_writes_enables_and_mounts_then_changes_nothing():
    host = Host()
    res = mounts.reconcile(host, [want("welcome")], owner="iscsi_initiator")
    assert res["changed"] and not res["removed"]
    assert host.mounted["/datasets/welcome"][2].startswith("ro,noload")
    assert "datasets-welcome.mount" in host.enabled
    host.log.clear()
    again = mounts.reconcile(host, [want("welcome")], owner="iscsi_initiator")
    assert again == {"changed": False, "mounts": again["mounts"], "removed": [], "commands": []}
    assert host.mutations() == []


def reloads(log) -> int:
    """How many times the commands reloaded systemd: daemon-reload, and enable/disable without --no-reload."""
    return sum(1 for a in log if a[0] == "systemctl" and (a[1] == "daemon-reload" or (
        {"enable", "disable"} & set(a) and "--no-reload" not in a)))


def test_a_mount_made_reloads_systemd_only_for_a_changed_unit_and_a_removal_once():
    """A reload costs seconds on a busy node and is paid per host of every publish: a new unit is loaded by
    systemd when started (no reload; its wants link made by hand), a changed unit systemd holds an older copy
    of is one reload (and mounted from the new text), a removal is one."""
    host = Host()
    mounts.ensure_mount(host, device=DEV.format(0), mountpoint="/datasets/a", fstype="ext4")
    assert reloads(host.log) == 0 and "datasets-a.mount" in host.enabled
    assert host.files[f"{UNITS}/remote-fs.target.wants/datasets-a.mount"] == f"{UNITS}/datasets-a.mount"
    host.log.clear()
    mounts.ensure_mount(host, device=DEV.format(1), mountpoint="/datasets/a", fstype="ext4")
    assert reloads(host.log) == 1 and ("systemctl", "daemon-reload") in host.log
    host.log.clear()
    mounts.ensure_mount(host, device=DEV.format(1), mountpoint="/datasets/a", fstype="ext4")
    assert reloads(host.log) == 0
    mounts.remove_mount(host, "/datasets/a")
    assert reloads(host.log) == 1 and "datasets-a.mount" not in host.enabled
    assert host.log.index(("rm", "-f", f"{UNITS}/datasets-a.mount")) < host.log.index(("systemctl", "daemon-reload"))


def test_reconcile_removes_only_its_own_units_that_are_no_longer_wanted():
    host = Host()
    mounts.reconcile(host, [want("welcome"), want("old")], owner="iscsi_initiator")
    mounts.ensure_mount(host, device=DEV.format(1), mountpoint="/datasets/imagenet/v1", fstype="ext4")  # fabricctl's
    host.files[f"{UNITS}/srv-manual.mount"] = "[Mount]\nWhat=/dev/sdz\nWhere=/srv/manual\n"  # hand-written
    res = mounts.reconcile(host, [want("welcome")], owner="iscsi_initiator")
    assert [u["mountpoint"] for u in res["removed"]] == ["/datasets/old"]
    assert res["removed"][0]["device"] == DEV.format(0)
    assert f"{UNITS}/datasets-old.mount" not in host.files and "/datasets/old" not in host.mounted
    assert "/datasets/imagenet/v1" in host.mounted and f"{UNITS}/srv-manual.mount" in host.files
    assert "/datasets/welcome" in host.mounted


def test_reconcile_refuses_to_remove_a_mount_in_use_and_changes_nothing():
    host = Host()
    mounts.reconcile(host, [want("welcome"), want("old")], owner="iscsi_initiator")
    host.users["/datasets/old"] = [("812", "python3")]
    host.log.clear()
    with pytest.raises(Busy) as err:
        mounts.reconcile(host, [want("welcome"), want("new")], owner="iscsi_initiator")
    assert "/datasets/old by 812 python3" in str(err.value)
    assert host.mutations() == [] and "/datasets/new" not in host.mounted
    forced = mounts.reconcile(host, [want("welcome")], owner="iscsi_initiator", force=True)
    assert ("umount", "-l", "/datasets/old") in host.log and forced["removed"]


def test_reconcile_refuses_a_mount_point_owned_by_someone_else_before_any_change():
    host = Host()
    mounts.reconcile(host, [want("old")], owner="iscsi_initiator")
    mounts.ensure_mount(host, device=DEV.format(1), mountpoint="/datasets/a", fstype="ext4")  # fabricctl's
    host.log.clear()
    with pytest.raises(UserError) as err:
        mounts.reconcile(host, [want("a")], owner="iscsi_initiator")  # /datasets/old would be purged
    assert "another tool" in str(err.value) and "fabricctl" in str(err.value)
    assert host.mutations() == [] and "/datasets/old" in host.mounted


def test_reconcile_refuses_duplicate_mount_points():
    with pytest.raises(UserError, match="listed twice"):
        mounts.reconcile(Host(), [want("a"), want("a")], owner="iscsi_initiator")


def test_dry_run_plans_and_writes_nothing():
    host = Host(dry_run=True)
    res = mounts.reconcile(host, [want("welcome")], owner="iscsi_initiator")
    assert res["changed"] and host.files == {} and host.mounted == {}
    assert any(a[0] == "install" for a in host.planned)


# --- the Ansible module over the same code -----------------------------------------------------------


def module(args, host, **kw):
    script = []  # run_module's scripted runner is replaced by the simulated host below

    class Patch:
        def __init__(self):
            from unittest import mock

            from ansible.module_utils import basic
            self.p = mock.patch.object(basic.AnsibleModule, "run_command",
                                       lambda self, a, **k: host._run(tuple(str(x) for x in a), k.get("data")))

        def start(self):
            self.p.start()

        def stop(self):
            self.p.stop()

    return run_module("fabric_mounts", args, script, extra_patches=[Patch()], **kw)


def test_module_mounts_purges_and_returns_the_removed_targets():
    host = Host()
    first = module({"owner": "iscsi_initiator", "mounts": [want("welcome"), want("old")]}, host)
    assert first["changed"] and [m["unit"] for m in first["mounts"]] == ["datasets-welcome.mount", "datasets-old.mount"]
    second = module({"owner": "iscsi_initiator", "mounts": [want("welcome")]}, host, diff=True)
    assert second["changed"]
    assert second["removed"][0]["target_iqn"] == "iqn.2026-11.io.fabric.lab:storage1-exports"
    assert second["removed"][0]["portal"] == "10.77.0.11:3260"
    assert "datasets-old.mount (removed)" in second["diff"]["before"]
    third = module({"owner": "iscsi_initiator", "mounts": [want("welcome")]}, host)
    assert third["changed"] is False and third["removed"] == []


def test_module_check_mode_changes_nothing():
    host = Host()
    res = module({"owner": "iscsi_initiator", "mounts": [want("welcome")]}, host, check_mode=True, diff=True)
    assert res["changed"] and host.files == {} and host.mounted == {}
    assert "Where=/datasets/welcome" in res["diff"]["after"]


def test_module_reports_a_busy_removal_as_a_failure():
    host = Host()
    module({"owner": "iscsi_initiator", "mounts": [want("welcome"), want("old")]}, host)
    host.users["/datasets/old"] = [("77", "train.py")]
    res = module({"owner": "iscsi_initiator", "mounts": [want("welcome")]}, host)
    assert res["failed"] and "77 train.py" in res["msg"] and "fix:" in res["msg"]


# recorded from systemd-escape --path --suffix=SUFFIX PATH (systemd 252, Debian 12)
@pytest.mark.parametrize("path, suffix, expected", [
    ("/datasets/sample/v1", "mount", "datasets-sample-v1.mount"),
    ("/dev/disk/by-id/dm-uuid-mpath-36001405116a2948ef9a561ab290b6913", "device",
     "dev-disk-by\\x2did-dm\\x2duuid\\x2dmpath\\x2d36001405116a2948ef9a561ab290b6913.device"),
    ("/dev/disk/by-path/ip-10.77.0.11:3260-iscsi-iqn.2026-11.io.fabric.lab.fabricctl:ds.sample.v1-lun-0", "mount",
     "dev-disk-by\\x2dpath-ip\\x2d10.77.0.11:3260\\x2discsi\\x2diqn.2026\\x2d11.io.fabric.lab.fabricctl:ds.sample.v1"
     "\\x2dlun\\x2d0.mount"),
    ("/checkpoints/train/restore/200", "mount", "checkpoints-train-restore-200.mount"),
    ("/datasets/a_b/.hidden/x y/ü", "mount", "datasets-a_b-.hidden-x\\x20y-\\xc3\\xbc.mount"),
    ("/", "mount", "-.mount"),
    ("//datasets//x/", "mount", "datasets-x.mount"),
    ("/datasets/v1.2/-x\\y", "mount", "datasets-v1.2-\\x2dx\\x5cy.mount"),
    ("/.snap/x", "mount", "\\x2esnap-x.mount"),
])
def test_unit_names_are_systemds(path, suffix, expected):
    assert mounts.path_unit(path, suffix) == expected


@pytest.mark.parametrize("path", ["datasets/x", "/datasets/../etc", ""])
def test_a_relative_or_unnormalized_path_has_no_unit_name(path):
    with pytest.raises(UserError, match="not an absolute, normalized path"):
        mounts.path_unit(path, "mount")


def test_a_runtime_mount_is_mounts_own_and_a_failed_one_says_why_naming_the_device():
    """A job's mount: `mount --mkdir` read-only with the fabric's options (`_netdev`: systemd stops it before the
    iSCSI sessions), no unit file, no daemon-reload; one there already read-only stays; mount's refusal is an error
    naming the device and the mount point."""
    from support import ScriptedRunner  # noqa: PLC0415

    point = "/datasets/imagenet/v3"
    argv = ["mount", "--mkdir", "-t", "ext4", "-o", "ro,noload,nodev,nosuid,_netdev", "/dev/sdb", point]
    runner = ScriptedRunner([{"command": argv, "rc": 0}])
    out = mounts.ensure_runtime_mount(runner, device="/dev/sdb", mountpoint=point, fstype="ext4", current=None)
    assert out["changed"] and out["commands"] == [f"mount /dev/sdb {point} (read-only, until reboot)"]
    runner.assert_done()
    kept = mounts.ensure_runtime_mount(ScriptedRunner([]), device="/dev/sdb", mountpoint=point, fstype="ext4",
                                       current={"source": "/dev/sdb", "fstype": "ext4", "options": ["ro"]})
    assert not kept["changed"]
    failing = ScriptedRunner([{"command": argv, "rc": 32, "stderr": f"mount: {point}: wrong fs type, bad option\n"}])
    with pytest.raises(UserError, match=f"mount of /dev/sdb at {point} failed: mount: .*wrong fs type"):
        mounts.ensure_runtime_mount(failing, device="/dev/sdb", mountpoint=point, fstype="ext4", current=None)
    with pytest.raises(UserError, match="mounted, and not read-only"):
        mounts.ensure_runtime_mount(ScriptedRunner([]), device="/dev/sdb", mountpoint=point, fstype="ext4",
                                    current={"source": "/dev/sdb", "fstype": "ext4", "options": ["rw"]})
