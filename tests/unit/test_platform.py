"""fabric_core.base.platform: the supported releases and the OpenZFS 2.3 decision, from recorded os-release
files and fixed package/module versions (every branch, no node)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fabric_core.base import platform
from fabric_core.base.platform import Facts, UnsupportedPlatform

DATA = Path(__file__).parent / "data" / "platform"


class Scripted:
    """A runner answering dpkg-query and zpool list from a table."""

    def __init__(self, answers: dict):
        self.answers = answers
        self.calls = []

    def run(self, argv, check=True, **kw):
        self.calls.append(argv[0])
        self.argvs = [*getattr(self, "argvs", []), tuple(argv)]
        rc, out = self.answers.get(argv[0], (1, ""))

        class R:
            pass

        r = R()
        r.rc, r.stdout, r.stderr = rc, out, ""
        return r


def facts(release: str = "trixie", package: str | None = "2.3.9-0+deb13u1", module: str | None = "2.3.9-0+deb13u1",
          pools=()) -> Facts:
    rel = platform.parse_os_release((DATA / f"os-release-{release}").read_text())
    return Facts(distribution=rel["ID"], major=rel["VERSION_ID"], codename=rel.get("VERSION_CODENAME", ""),
                 pretty=rel["PRETTY_NAME"], zfs_package=package, zfs_module=module, pools=list(pools))


def test_read_one_pass_over_the_node(tmp_path):
    mod = tmp_path / "version"
    mod.write_text("2.3.9-0+deb13u1\n")
    runner = Scripted({"dpkg-query": (0, "ii \t2.3.9-0+deb13u1"), "zpool": (0, "tank\nscratch\n")})
    got = platform.read(runner, os_release=DATA / "os-release-trixie", module_version=mod)
    assert (got.distribution, got.major, got.codename) == ("debian", "13", "trixie")
    assert got.zfs_package == got.zfs_module == "2.3.9-0+deb13u1"
    assert got.pools == ["tank", "scratch"]


def test_read_a_node_without_zfs(tmp_path):
    runner = Scripted({"dpkg-query": (1, "")})
    got = platform.read(runner, os_release=DATA / "os-release-bookworm", module_version=tmp_path / "absent")
    assert got.zfs_package is None and got.zfs_module is None and got.pools == []
    assert runner.calls == ["dpkg-query"]  # no zpool call without the module


def test_a_removed_but_not_purged_package_is_not_installed(tmp_path):
    runner = Scripted({"dpkg-query": (0, "rc \t2.1.11-1+deb12u1")})
    got = platform.read(runner, os_release=DATA / "os-release-bookworm", module_version=tmp_path / "absent")
    assert got.zfs_package is None


@pytest.mark.parametrize("text, want", [
    ("2.3.2-2~bpo12+1", (2, 3, 2)), ("2.1.11-1+deb12u1", (2, 1, 11)), ("2.3.9-0+deb13u1", (2, 3, 9)),
    ("1:2.3.0-1", (2, 3, 0)), ("2.3", (2, 3, 0)), (None, None), ("", None), ("junk", None),
])
def test_version_tuple(text, want):
    assert platform.version_tuple(text) == want


def test_debian_13_with_zfs_2_3_is_ok():
    d = platform.zfs_decision(facts())
    assert d.action == "ok" and not d.backports and "trixie contrib" in d.explanation


def test_debian_13_without_zfs_installs_from_contrib():
    d = platform.zfs_decision(facts(package=None, module=None))
    assert d.action == "install" and not d.backports


def test_debian_12_without_zfs_installs_2_3_from_backports():
    d = platform.zfs_decision(facts("bookworm", package=None, module=None))
    assert d.action == "install" and d.backports and "bookworm-backports" in d.explanation


def test_debian_12_with_backports_zfs_is_ok():
    d = platform.zfs_decision(facts("bookworm", package="2.3.2-2~bpo12+1", module="2.3.2-2~bpo12+1", pools=["tank"]))
    assert d.action == "ok" and d.backports


def test_debian_12_on_zfs_2_1_with_a_pool_is_refused_with_the_steps():
    f = facts("bookworm", package="2.1.11-1+deb12u1", module="2.1.11-1+deb12u1", pools=["tank"])
    with pytest.raises(UnsupportedPlatform) as exc:
        platform.zfs_decision(f)
    err = exc.value
    assert "2.1.11-1+deb12u1" in err.problem and "tank" in err.problem
    for step in ("bookworm-backports", "Pin-Priority: 990", "apt-get install -t bookworm-backports", "reboot",
                 "zpool upgrade", "storage_base_zfs_allow_upgrade"):
        assert step in err.fix, step
    assert err.exit_code == 1


def test_debian_12_on_zfs_2_1_with_only_the_module_loaded_is_refused_too():
    with pytest.raises(UnsupportedPlatform):
        platform.zfs_decision(facts("bookworm", package="2.1.11-1+deb12u1", module="2.1.11-1+deb12u1"))


def test_debian_12_on_zfs_2_1_upgrades_when_allowed_or_unused():
    allowed = platform.zfs_decision(facts("bookworm", package="2.1.11-1+deb12u1", module="2.1.11-1+deb12u1",
                                          pools=["tank"]), allow_upgrade=True)
    assert allowed.action == "upgrade" and allowed.backports and "as allowed" in allowed.explanation
    unused = platform.zfs_decision(facts("bookworm", package="2.1.11-1+deb12u1", module=None))
    assert unused.action == "upgrade" and "unused" in unused.explanation


def test_older_module_under_new_packages_needs_a_reboot():
    f = facts("bookworm", package="2.3.2-2~bpo12+1", module="2.1.11-1+deb12u1", pools=["tank"])
    with pytest.raises(UnsupportedPlatform) as exc:
        platform.zfs_decision(f, allow_upgrade=True)
    assert "reboot" in exc.value.problem and "storage_base_zfs_allow_reboot" in exc.value.fix
    assert platform.zfs_decision(f, allow_reboot=True).action == "reboot"


def test_a_later_release_installed_under_the_running_module_needs_a_reboot_naming_it():
    # trixie 2.3.9 running, trixie-backports 2.4.4 installed (docs/operations.md, "Upgrading": tried on the lab)
    f = facts(package="2.4.4-1~bpo13+1", module="2.3.9-0+deb13u1", pools=["tank"])
    with pytest.raises(UnsupportedPlatform) as exc:
        platform.zfs_decision(f)
    assert "must reboot to run 2.4.4-1~bpo13+1" in exc.value.problem and "2.3.9-0+deb13u1" in exc.value.problem
    allowed = platform.zfs_decision(f, allow_reboot=True)
    assert allowed.action == "reboot" and "rebooting to load 2.4.4-1~bpo13+1" in allowed.explanation
    # after the reboot: 2.4 is as good as 2.3 (the fabric needs 2.3 or later)
    assert platform.zfs_decision(facts(package="2.4.4-1~bpo13+1", module="2.4.4-1~bpo13+1")).action == "ok"


def test_a_point_release_installed_reboots_only_when_allowed_and_otherwise_says_so():
    f = facts(package="2.3.10-0+deb13u1", module="2.3.9-0+deb13u1", pools=["tank"])
    waiting = platform.zfs_decision(f)
    assert waiting.action == "ok" and "2.3.9-0+deb13u1 loaded until the next reboot" in waiting.explanation
    allowed = platform.zfs_decision(f, allow_reboot=True)
    assert allowed.action == "reboot" and "rebooting to load 2.3.10-0+deb13u1, as allowed" in allowed.explanation


@pytest.mark.parametrize("release", ["ubuntu"])
def test_other_systems_are_refused_naming_the_two(release):
    with pytest.raises(UnsupportedPlatform) as exc:
        platform.check_supported(facts(release))
    assert "Ubuntu 24.04.1 LTS" in exc.value.problem
    assert "Debian 13 (trixie)" in exc.value.problem and "Debian 12 (bookworm" in exc.value.problem


def test_debian_11_is_refused():
    f = facts("bookworm")
    f.major, f.codename, f.pretty = "11", "bullseye", "Debian GNU/Linux 11 (bullseye)"
    with pytest.raises(UnsupportedPlatform) as exc:
        platform.zfs_decision(f)
    assert "bullseye" in exc.value.problem


def test_missing_packages_from_one_dpkg_query():
    # recorded on the trixie lab: dpkg-query -W -f='${Package}\t${db:Status-Abbrev}\n' zfs-dkms nosuchpkg
    # python3-rtslib-fb (exit 1 for the unknown one); plus a removed-but-configured package (rc)
    runner = Scripted({"dpkg-query": (1, "python3-rtslib-fb\tii \nzfs-dkms\tii \nsanoid\trc \n")})
    assert platform.missing_packages(runner, ["zfs-dkms", "nosuchpkg", "python3-rtslib-fb", "sanoid"]) == [
        "nosuchpkg", "sanoid"]
    assert platform.missing_packages(Scripted({}), []) == []


# recorded on the trixie lab's gpu1: systemctl show --property=Id,LoadState,UnitFileState,ActiveState -- iscsid.service
# nosuch.service open-iscsi.service fabric-node-gc.service (exit 0; one block per unit, in the order given)
SHOWN = ("Id=iscsid.service\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n\n"
         "Id=nosuch.service\nLoadState=not-found\nActiveState=inactive\nUnitFileState=\n\n"
         "Id=open-iscsi.service\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n\n"
         "Id=fabric-node-gc.service\nLoadState=loaded\nActiveState=inactive\nUnitFileState=enabled\n")
UNITS = ["iscsid.service", "nosuch.service", "open-iscsi.service", "fabric-node-gc.service"]


def test_unit_states_from_one_systemctl_show():
    runner = Scripted({"systemctl": (0, SHOWN)})
    states = platform.unit_states(runner, UNITS)
    assert states == {"iscsid.service": {"load": "loaded", "file": "enabled", "active": "active"},
                      "nosuch.service": {"load": "not-found", "file": "", "active": "inactive"},
                      "open-iscsi.service": {"load": "loaded", "file": "enabled", "active": "active"},
                      "fabric-node-gc.service": {"load": "loaded", "file": "enabled", "active": "inactive"}}
    assert runner.argvs == [
        ("systemctl", "show", "--property=Id,LoadState,UnitFileState,ActiveState", "--", *UNITS)]


def test_unit_states_unread_read_as_nothing_known():
    """No systemd, a failing systemctl or an answer that does not match the units asked: {} (the role's tasks then
    run as they would without the read)."""
    assert platform.unit_states(Scripted({"systemctl": (1, "")}), UNITS) == {}
    assert platform.unit_states(Scripted({"systemctl": (0, SHOWN.split("\n\n")[0])}), UNITS) == {}
    assert platform.unit_states(Scripted({}), []) == {}


def test_file_digests_from_one_shell():
    # the shell's output as dash printed it on the host for a directory with one file, a link to it (not listed) and
    # a subdirectory (not listed), and a directory that does not exist (nothing)
    out = "644 root root ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad /tmp/fd/a.whl\n"
    runner = Scripted({"sh": (0, out)})
    assert platform.file_digests(runner, ["/tmp/fd", "/tmp/nonexist"]) == {
        "/tmp/fd/a.whl": {"sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "mode": "644",
                          "owner": "root", "group": "root"}}
    assert runner.argvs == [("sh", "-c", platform.FILE_DIGESTS, "sh", "/tmp/fd", "/tmp/nonexist")]
    assert platform.file_digests(Scripted({"sh": (0, "garbage\n")}), ["/x"]) == {}
    assert platform.file_digests(Scripted({}), []) == {}
