"""fabric_core.node.iscsi: parsers on recorded iscsiadm output, ensure_session command sequences."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# isort: off
from support import ScriptedRunner, data  # first: it puts module_utils on sys.path
from fabric_core.base.errors import Busy, CommandError, InvalidName, UserError
from fabric_core.node.devices import DeviceTimeout
from fabric_core.node.iscsi import (
    AuthorizationFailed,
    PortalUnreachable,
    SessionLive,
    by_path,
    ensure_session,
    normalize_portal,
    parse_by_path,
    parse_discovery,
    parse_node_record,
    parse_nodes,
    parse_sessions,
    plan_session,
    record_writer_argv,
    redact,
    session_spec,
)
# isort: on

PORTAL = "10.77.0.11:3260"
EXT4 = "iqn.2026-11.io.fabric.lab:hd-ext4"
XFS = "iqn.2026-11.io.fabric.lab:hd-xfs"
CHAPT = "iqn.2026-11.io.fabric.lab:hd-chap"
CHAP = {"username": "hduser", "password": "hdsecret12345", "username_in": "hdtarget", "password_in": "hdmutual12345"}


def rec(name: str) -> tuple[str, int]:
    """A recorded .txt file: (output without the __rc line, exit status)."""
    text = data("iscsi", name)
    lines = text.splitlines(keepends=True)
    if lines and lines[-1].startswith("__rc="):
        return "".join(lines[:-1]), int(lines[-1].strip().split("=")[1])
    return text, 0


def step(argv, name=None, rc=None, stdout=None, stderr=""):
    out, recorded_rc = rec(name) if name else ("", 0)
    return {"command": argv, "rc": recorded_rc if rc is None else rc,
            "stdout": out if stdout is None else stdout, "stderr": stderr}


def node(iqn, *extra):
    return ["iscsiadm", "-m", "node", "-T", iqn, "-p", PORTAL, *extra]


def node_new(iqn):
    """A record made with the fabric's TPG tag (names.TPG_TAG): a file no other iface's record shares."""
    return ["iscsiadm", "-m", "node", "-T", iqn, "-p", f"{PORTAL},1", "-o", "new"]


SESSIONS = ["iscsiadm", "-m", "session", "-P", "3"]


def device_steps(iqn, kernel="sda"):
    return [step(["udevadm", "wait", "--timeout=60", by_path(PORTAL, iqn)]),
            step(["readlink", "-e", by_path(PORTAL, iqn)], stdout=f"/dev/{kernel}\n")]


def update(iqn, *pairs):
    """``iscsiadm -o update`` of KEY VALUE [KEY VALUE ...]: one command with a -n/-v pair each."""
    return node(iqn, "-o", "update", *[arg for key, value in zip(pairs[::2], pairs[1::2], strict=True)
                                       for arg in ("-n", key, "-v", value)])


def secrets(iqn, **values):
    """The write of CHAP secrets into the node record: the writer's argv (no secret), the values on stdin."""
    keys = {"password": "node.session.auth.password", "password_in": "node.session.auth.password_in"}
    return step(list(record_writer_argv(iqn, PORTAL)), stdout="1\n") | {
        "data": json.dumps({keys[k]: v for k, v in values.items()})}


# ------------------------------------------------------------------------------------- parsers

def test_parse_sessions_plain():
    sessions = parse_sessions(rec("session_two.txt")[0])
    assert [(s["sid"], s["target"], s["portal"], s["tpgt"], s["transport"]) for s in sessions] == [
        (2, EXT4, PORTAL, 1, "tcp"), (3, XFS, PORTAL, 1, "tcp")]
    assert parse_sessions(rec("session_none.txt")[0]) == []
    assert rec("session_none.txt")[1] == 21


def test_parse_sessions_p3_has_state_initiator_and_disks():
    sessions = parse_sessions(rec("session_p3.txt")[0])
    assert len(sessions) == 2
    ext4, xfs = sessions
    assert ext4 == {"target": EXT4, "portal": PORTAL, "tpgt": 1, "sid": 2, "transport": "tcp", "state": "LOGGED_IN",
                    "connection_state": "LOGGED IN", "initiator": "iqn.2004-10.com.debian:fa49841e5fe",
                    "disks": [{"lun": 0, "disk": "sdb"}]}
    assert (xfs["target"], xfs["sid"], xfs["disks"]) == (XFS, 3, [{"lun": 0, "disk": "sda"}])


def test_parse_sessions_p1():
    sessions = parse_sessions(rec("session_p1.txt")[0])
    assert [(s["target"], s["sid"], s["state"]) for s in sessions] == [(CHAPT, 1, "LOGGED_IN"), (EXT4, 2, "LOGGED_IN")]
    assert all(s["disks"] == [] for s in sessions)


def test_parse_nodes_and_discovery():
    assert parse_nodes(rec("node_list.txt")[0]) == [
        {"portal": PORTAL, "tpgt": 1, "target": t} for t in (CHAPT, EXT4, XFS)]
    # records made with `-o new` print the tpgt as 4294967295 (-1)
    assert parse_nodes(rec("node_list2.txt")[0]) == [
        {"portal": PORTAL, "tpgt": -1, "target": t} for t in (EXT4, XFS)]
    assert parse_nodes(rec("node_none.txt")[0]) == []
    assert [n["target"] for n in parse_discovery(rec("discovery.txt")[0])] == [EXT4, XFS, CHAPT]
    assert parse_discovery(rec("discovery_unreachable.txt")[0]) == []


def test_parse_node_record_masks_and_empty():
    default = parse_node_record(data("iscsi", "node_default.txt"))
    assert default["node.name"] == XFS
    assert default["node.startup"] == "manual"
    assert default["node.session.auth.authmethod"] == "None"
    assert default["node.session.auth.username"] == ""
    chap = parse_node_record(data("iscsi", "node_chap.txt"))
    assert chap["node.startup"] == "automatic"
    assert chap["node.session.auth.username"] == "hduser"
    assert chap["node.session.auth.password"] == "********"  # masked without -S
    shown = parse_node_record(data("iscsi", "node_chap_show.txt"))
    assert shown["node.session.auth.password"] == "hdsecret12345"
    assert shown["node.session.auth.password_in"] == "hdmutual12345"


# ------------------------------------------------------------------------------------- helpers

def test_portals():
    assert normalize_portal("10.77.0.11") == PORTAL
    assert normalize_portal("10.77.0.11:3261") == "10.77.0.11:3261"
    assert normalize_portal("fd00::1") == "[fd00::1]:3260"
    assert normalize_portal("[fd00::1]:3270") == "[fd00::1]:3270"
    for bad in ("storage1", "10.77.0.11:0", "", "10.77.0.300"):
        with pytest.raises(UserError):
            normalize_portal(bad)
    assert by_path("10.77.0.11", EXT4, 2) == f"/dev/disk/by-path/ip-{PORTAL}-iscsi-{EXT4}-lun-2"
    assert parse_by_path(by_path("10.77.0.11", EXT4, 2)) == {"portal": PORTAL, "target_iqn": EXT4, "lun": 2}
    assert parse_by_path(by_path("fd00::1", EXT4)) == {"portal": "[fd00::1]:3260", "target_iqn": EXT4, "lun": 0}
    assert parse_by_path("/dev/zvol/tank/x") is None and parse_by_path("") is None
    argv = update(CHAPT, "node.session.auth.password", "s3cret")
    assert redact(argv)[-1] == "********" and "s3cret" not in redact(argv)
    assert redact(update(CHAPT, "node.session.auth.username", "hduser"))[-1] == "hduser"


def test_bad_input_fails_before_any_command():
    runner = ScriptedRunner([])
    with pytest.raises(InvalidName):
        ensure_session(runner, portal=PORTAL, target_iqn="iqn.bad")
    with pytest.raises(UserError, match="both username and password"):
        ensure_session(runner, portal=PORTAL, target_iqn=EXT4, chap={"username": "x"})
    with pytest.raises(UserError, match="mutual"):
        ensure_session(runner, portal=PORTAL, target_iqn=EXT4,
                       chap={"username": "x", "password": "y" * 12, "username_in": "z"})
    with pytest.raises(UserError, match="startup"):
        ensure_session(runner, portal=PORTAL, target_iqn=EXT4, startup="sometimes")
    assert runner.calls == []


# ------------------------------------------------------------------------------- ensure_session

def fresh_login_script(iqn=XFS):
    return [
        step(SESSIONS, "session_none.txt"),
        step(node(iqn), "node_show_missing.txt"),
        step(node_new(iqn), stdout=data("iscsi", "node_new.txt")),
        step(node(iqn, "-o", "update", "-n", "node.startup", "-v", "automatic",
                  "-n", "node.session.auth.authmethod", "-v", "None")),
        step(["iscsiadm", "-m", "node", "-T", iqn, "-p", PORTAL, "--login"],
             stdout=data("iscsi", "login_ok.stdout"), stderr=data("iscsi", "login_ok.stderr")),
        *device_steps(iqn, "sda"),
        step(SESSIONS, stdout=data("iscsi", "session_p3.txt")),
    ]


def test_fresh_login():
    runner = ScriptedRunner(fresh_login_script())
    res = ensure_session(runner, portal="10.77.0.11", target_iqn=XFS, sleep=lambda s: None)
    runner.assert_done()
    assert res["changed"] and res["record_created"]
    # every setting, in one iscsiadm: a fresh record is not read back (a default set again costs nothing)
    assert res["updated"] == ["node.startup", "node.session.auth.authmethod"]
    assert res["commands"] == [
        f"iscsiadm -m node -T {XFS} -p {PORTAL},1 -o new",
        f"iscsiadm -m node -T {XFS} -p {PORTAL} -o update -n node.startup -v automatic "
        "-n node.session.auth.authmethod -v None",
        f"iscsiadm -m node -T {XFS} -p {PORTAL} --login"]
    assert res["device"] == f"/dev/disk/by-path/ip-{PORTAL}-iscsi-{XFS}-lun-0"
    assert res["kernel_device"] == "/dev/sda"
    assert res["session"]["sid"] == 3 and res["session"]["disks"] == [{"lun": 0, "disk": "sda"}]
    assert res["before"] == {"logged_in": False, "record": False}
    assert res["after"]["logged_in"] and res["after"]["node.startup"] == "automatic"


def test_fresh_login_dry_run_plans_changes_and_does_the_local_reads():
    script = fresh_login_script()[:2]  # reads only: sessions, record (the portal is never asked)
    runner = ScriptedRunner(script, dry_run=True)
    res = ensure_session(runner, portal=PORTAL, target_iqn=XFS)
    runner.assert_done()
    assert res["changed"]
    assert [list(a) for a in runner.planned][-1] == node(XFS, "--login")
    assert len(runner.planned) == 3  # new, the settings (startup, authmethod: the record is unknown), login
    assert res["device"] == by_path(PORTAL, XFS) and res["kernel_device"] is None


def test_already_logged_in_changes_nothing():
    automatic = data("iscsi", "node_default.txt").replace("node.startup = manual", "node.startup = automatic")
    runner = ScriptedRunner([
        step(SESSIONS, stdout=data("iscsi", "session_p3.txt")),
        step(node(EXT4), stdout=automatic),
        *device_steps(EXT4, "sdb"),
    ])
    res = ensure_session(runner, portal=PORTAL, target_iqn=EXT4)
    runner.assert_done()
    assert not res["changed"] and res["commands"] == [] and res["updated"] == []
    assert res["session"]["sid"] == 2 and res["kernel_device"] == "/dev/sdb"
    assert res["before"] == {k: v for k, v in res["after"].items()}


def test_chap_update_sets_only_differences_and_redacts():
    # the record has the CHAP of node_chap_show.txt; the password changes, the rest is equal
    new = dict(CHAP, password="anothersecret1")
    chap_session = data("iscsi", "session_p1.txt")
    runner = ScriptedRunner([
        step(SESSIONS, stdout=chap_session),
        step(node(CHAPT, "-S"), stdout=data("iscsi", "node_chap_show.txt")),
        secrets(CHAPT, password="anothersecret1"),
        *device_steps(CHAPT),
    ])
    res = ensure_session(runner, portal=PORTAL, target_iqn=CHAPT, chap=new)
    runner.assert_done()
    assert res["changed"] and res["updated"] == ["node.session.auth.password"]
    assert res["commands"] == [
        f"write node.session.auth.password into the node record of {CHAPT} at {PORTAL} (mode 0600, from stdin)"]
    assert "anothersecret1" not in repr(res) and "hdsecret12345" not in repr(res)
    assert not any("anothersecret1" in " ".join(argv) for argv in runner.calls)  # never on a command line
    assert res["warnings"] and "next login" in res["warnings"][0]
    assert res["after"]["node.session.auth.password"] == "******** (changed)"
    assert res["before"]["node.session.auth.password"] == "********"


def test_chap_same_credentials_is_idempotent():
    runner = ScriptedRunner([
        step(SESSIONS, stdout=data("iscsi", "session_p1.txt")),
        step(node(CHAPT, "-S"), stdout=data("iscsi", "node_chap_show.txt")),
        *device_steps(CHAPT),
    ])
    res = ensure_session(runner, portal=PORTAL, target_iqn=CHAPT, chap=CHAP)
    runner.assert_done()
    assert not res["changed"]


def test_one_way_chap_clears_mutual_credentials():
    runner = ScriptedRunner([
        step(SESSIONS, stdout=data("iscsi", "session_p1.txt")),
        step(node(CHAPT, "-S"), stdout=data("iscsi", "node_chap_show.txt")),
        step(update(CHAPT, "node.session.auth.username_in", "")),
        secrets(CHAPT, password_in=""),
        *device_steps(CHAPT),
    ])
    res = ensure_session(runner, portal=PORTAL, target_iqn=CHAPT,
                         chap={"username": "hduser", "password": "hdsecret12345"})
    runner.assert_done()
    assert res["updated"] == ["node.session.auth.username_in", "node.session.auth.password_in"]


def test_logout_and_delete_record():
    runner = ScriptedRunner([
        step(SESSIONS, stdout=data("iscsi", "session_p3.txt")),
        step(node(XFS), stdout=data("iscsi", "node_default.txt")),
        step(["lsblk", "-nro", "MOUNTPOINT", "/dev/sda"], stdout="\n"),
        step(node(XFS, "--logout"), "logout.txt"),
        step(node(XFS, "-o", "delete")),
    ])
    res = ensure_session(runner, portal=PORTAL, target_iqn=XFS, state="logged_out")
    runner.assert_done()
    assert res["changed"] and res["session"] is None
    assert res["commands"] == [f"iscsiadm -m node -T {XFS} -p {PORTAL} --logout",
                               f"iscsiadm -m node -T {XFS} -p {PORTAL} -o delete"]


def test_logout_when_gone_changes_nothing():
    runner = ScriptedRunner([step(SESSIONS, "session_none.txt"), step(node(XFS), "node_show_missing.txt")])
    res = ensure_session(runner, portal=PORTAL, target_iqn=XFS, state="logged_out")
    runner.assert_done()
    assert not res["changed"] and res["commands"] == []


def test_logout_refused_while_mounted():
    runner = ScriptedRunner([
        step(SESSIONS, stdout=data("iscsi", "session_p3.txt")),
        step(node(XFS), stdout=data("iscsi", "node_default.txt")),
        step(["lsblk", "-nro", "MOUNTPOINT", "/dev/sda"], stdout="/datasets/hd-xfs\n"),
    ])
    with pytest.raises(Busy, match="/datasets/hd-xfs"):
        ensure_session(runner, portal=PORTAL, target_iqn=XFS, state="logged_out")
    runner.assert_done()


def test_dry_run_logout_ignores_the_callers_planned_unmount_only():
    """In a dry run the caller's own unmount has not happened: that mount point does not block
    the planned logout, any other one still does; a real run never ignores a mount."""
    def script(mountpoint):
        return [step(SESSIONS, stdout=data("iscsi", "session_p3.txt")),
                step(node(XFS), stdout=data("iscsi", "node_default.txt")),
                step(["lsblk", "-nro", "MOUNTPOINT", "/dev/sda"], stdout=f"{mountpoint}\n")]
    runner = ScriptedRunner(script("/datasets/hd-xfs"), dry_run=True)
    res = ensure_session(runner, portal=PORTAL, target_iqn=XFS, state="logged_out", unmounting=("/datasets/hd-xfs",))
    runner.assert_done()
    assert res["changed"] and res["commands"] == [f"iscsiadm -m node -T {XFS} -p {PORTAL} --logout",
                                                  f"iscsiadm -m node -T {XFS} -p {PORTAL} -o delete"]
    runner = ScriptedRunner(script("/elsewhere"), dry_run=True)
    with pytest.raises(Busy, match="/elsewhere"):
        ensure_session(runner, portal=PORTAL, target_iqn=XFS, state="logged_out", unmounting=("/datasets/hd-xfs",))
    runner = ScriptedRunner(script("/datasets/hd-xfs"))
    with pytest.raises(Busy, match="/datasets/hd-xfs"):
        ensure_session(runner, portal=PORTAL, target_iqn=XFS, state="logged_out", unmounting=("/datasets/hd-xfs",))


def login_failure_script(name, chap=None):
    text, rc = rec(name)
    record = data("iscsi", "node_chap_show_tagged.txt").replace("hdsecret12345", "wrongsecret99") if chap else \
        data("iscsi", "node_default_tagged.txt")
    iqn = CHAPT if chap else EXT4
    return [
        step(SESSIONS, "session_none.txt"),
        step(node(iqn, *(["-S"] if chap else [])), stdout=record),
        *([secrets(iqn, password=chap["password"])] if chap else []),
        step(node(iqn, "--login"), rc=rc, stdout="", stderr=text),
        step(["cat", "/etc/iscsi/initiatorname.iscsi"], stdout="InitiatorName=iqn.2026-11.io.fabric.lab:gpu1\n"),
    ]


def test_authorization_failure_is_typed_and_redacted():
    chap = dict(CHAP, password="notthesecret1")
    runner = ScriptedRunner(login_failure_script("login_badchap.txt", chap))
    with pytest.raises(AuthorizationFailed) as exc:
        ensure_session(runner, portal=PORTAL, target_iqn=CHAPT, chap=chap)
    runner.assert_done()
    err = exc.value
    assert err.rc == 24 and err.reason == "authorization"
    assert "not in the target's ACL" in str(err) and "CHAP" in str(err)
    assert "iqn.2026-11.io.fabric.lab:gpu1" in str(err)
    assert "fix:" in str(err)
    assert "notthesecret1" not in str(err) and "hdmutual12345" not in str(err)


def test_authorization_failure_without_chap_acl():
    runner = ScriptedRunner(login_failure_script("login_noacl.txt"))
    with pytest.raises(AuthorizationFailed, match="ACL"):
        ensure_session(runner, portal=PORTAL, target_iqn=EXT4)
    runner.assert_done()


def test_unreachable_portal_on_login():
    runner = ScriptedRunner(login_failure_script("login_refused.txt"))
    with pytest.raises(PortalUnreachable) as exc:
        ensure_session(runner, portal=PORTAL, target_iqn=EXT4)
    assert exc.value.rc == 8 and "cannot be reached" in str(exc.value) and "firewall" in str(exc.value)


def test_failed_update_error_is_redacted():
    runner = ScriptedRunner([
        step(SESSIONS, "session_none.txt"),
        step(node(CHAPT, "-S"), stdout=data("iscsi", "node_default_tagged.txt")),
        step(update(CHAPT, "node.session.auth.authmethod", "CHAP",
                    "node.session.auth.username", "hduser", "node.session.auth.username_in", "hdtarget")),
        secrets(CHAPT, password="hdsecret12345", password_in="hdmutual12345") | {"rc": 2,
                                                                               "stderr": "no node record"},
    ])
    with pytest.raises(CommandError) as exc:
        ensure_session(runner, portal=PORTAL, target_iqn=CHAPT, chap=CHAP)
    assert "hdsecret12345" not in str(exc.value) and "no node record" in str(exc.value)
    assert "write node.session.auth.password, node.session.auth.password_in" in str(exc.value)


def test_device_that_never_appears_times_out():
    clock = iter([0.0, 0.0, 1.0, 2.5])
    runner = ScriptedRunner([
        step(["udevadm", "wait", "--timeout=2", by_path(PORTAL, EXT4)]),
        *[step(["readlink", "-e", by_path(PORTAL, EXT4)], rc=1) for _ in range(3)],
    ])
    from fabric_core.node.iscsi import wait_for_device
    with pytest.raises(DeviceTimeout, match="did not appear"):
        wait_for_device(runner, by_path(PORTAL, EXT4), timeout=2, sleep=lambda s: None, clock=lambda: next(clock))
    runner.assert_done()


def test_no_discovery_a_record_is_made_from_the_target_name_given():
    """The fabric's storage nodes refuse SendTargets discovery (a host learns only the target names it is
    given): a real run and a dry run make the record from the name, the portal is never asked; a target the
    portal does not have fails at the login (PortalUnreachable, test_unreachable_portal_on_login)."""
    other = "iqn.2026-11.io.fabric.lab:other"
    for dry_run in (True, False):
        script = [step(SESSIONS, "session_none.txt"), step(node(other), "node_show_missing.txt")]
        if not dry_run:
            script += [step(node_new(other)),
                       step(update(other, "node.startup", "automatic", "node.session.auth.authmethod", "None")),
                       step(node(other, "--login")),
                       *device_steps(other), step(SESSIONS, stdout=data("iscsi", "session_p3.txt"))]
        runner = ScriptedRunner(script, dry_run=dry_run)
        res = ensure_session(runner, portal=PORTAL, target_iqn=other, sleep=lambda s: None)
        runner.assert_done()  # no discovery command
        assert res["changed"] and not any("discovery" in argv for argv in runner.calls)
        if dry_run:
            assert runner.executed == [] and [list(a) for a in runner.planned][-1] == node(other, "--login")


def test_a_fresh_record_with_chap_gets_its_secrets_from_stdin_only():
    runner = ScriptedRunner([
        step(SESSIONS, "session_none.txt"),
        step(node(CHAPT, "-S"), "node_show_missing.txt"),
        step(node_new(CHAPT)),
        step(update(CHAPT, "node.startup", "automatic", "node.session.auth.authmethod", "CHAP",
                    "node.session.auth.username", "hduser", "node.session.auth.username_in", "hdtarget")),
        secrets(CHAPT, password="hdsecret12345", password_in="hdmutual12345"),
        step(node(CHAPT, "--login")),
        *device_steps(CHAPT),
        step(SESSIONS, stdout=data("iscsi", "session_p1.txt")),
    ])
    res = ensure_session(runner, portal=PORTAL, target_iqn=CHAPT, chap=CHAP, sleep=lambda s: None)
    runner.assert_done()
    for argv in runner.calls:
        assert "hdsecret12345" not in " ".join(argv) and "hdmutual12345" not in " ".join(argv)
    assert "hdsecret12345" in runner.stdin[4] and "hdmutual12345" in runner.stdin[4]
    assert "hdsecret12345" not in repr(res)


# -------------------------------------------------------------------- the node record writer itself

RECORD = """# BEGIN RECORD 2.1.8
node.name = {iqn}
node.tpgt = -1
node.startup = automatic
node.session.auth.authmethod = CHAP
node.session.auth.username = hduser
node.session.auth.password = oldsecret12345
node.conn[0].address = 10.77.0.11
# END RECORD
"""


def write_secrets(roots, values, iqn=CHAPT, portal=PORTAL):
    argv = [sys.executable if a == "python3" else a for a in record_writer_argv(iqn, portal)]
    argv = argv[:6] + [str(r) for r in roots]
    return subprocess.run(argv, input=json.dumps(values), capture_output=True, text=True)


def test_the_record_writer_replaces_secrets_atomically_mode_0600(tmp_path):
    """Both layouts iscsiadm writes: the old one (a file IP,PORT for a record without a TPGT, as `-o new`
    makes) and the new one (IP,PORT,TPGT/IFACE); any other portal's record is left alone."""
    old = tmp_path / "nodes" / CHAPT / "10.77.0.11,3260"
    new = tmp_path / "nodes" / CHAPT / "10.77.0.11,3260,1" / "default"
    other = tmp_path / "nodes" / CHAPT / "10.77.0.12,3260"
    new.parent.mkdir(parents=True)
    for path in (old, new, other):
        path.write_text(RECORD.format(iqn=CHAPT))
        path.chmod(0o600)
    res = write_secrets([tmp_path / "nodes", tmp_path / "absent"],
                        {"node.session.auth.password": "newsecret12345",
                         "node.session.auth.password_in": "mutualsecret1"})
    assert res.returncode == 0, res.stderr
    for path in (old, new):
        text = path.read_text()
        assert "newsecret12345" in text and "mutualsecret1" in text and "oldsecret12345" not in text
        assert text.rstrip().endswith("# END RECORD") and text.count("node.session.auth.password =") == 1
        assert os.stat(path).st_mode & 0o777 == 0o600
    assert "oldsecret12345" in other.read_text()
    assert sorted(p.name for p in old.parent.iterdir()) == ["10.77.0.11,3260", "10.77.0.11,3260,1",
                                                            "10.77.0.12,3260"]  # no temporary file left
    res = write_secrets([tmp_path / "nodes"], {"node.session.auth.password_in": ""})
    assert res.returncode == 0 and "password_in" not in old.read_text()


def test_the_record_writer_with_an_iface_writes_that_ifaces_record_only(tmp_path):
    """Both layouts: the IP,PORT,TPGT/IFACE files by their name, an old IP,PORT file by the iface it names."""
    tagged = tmp_path / CHAPT / "10.77.0.11,3260,1"
    tagged.mkdir(parents=True)
    old = tmp_path / CHAPT / "10.77.0.11,3260"
    for path in (tagged / "default", tagged / "spoof", old):
        path.write_text(RECORD.format(iqn=CHAPT))
    old.write_text(old.read_text().replace("# END RECORD", "iface.iscsi_ifacename = other\n# END RECORD"))
    argv = [sys.executable if a == "python3" else a for a in record_writer_argv(CHAPT, PORTAL, iface="spoof")]
    assert argv[6] == "--iface=spoof"
    res = subprocess.run(argv[:7] + [str(tmp_path)], input=json.dumps({"node.session.auth.password": "spoofsecret1"}),
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "spoofsecret1" in (tagged / "spoof").read_text()
    assert "spoofsecret1" not in (tagged / "default").read_text() + old.read_text()
    argv[6] = "--iface=other"
    res = subprocess.run(argv[:7] + [str(tmp_path)], input=json.dumps({"node.session.auth.password": "othersecret1"}),
                         capture_output=True, text=True)
    assert res.returncode == 0 and "othersecret1" in old.read_text(), res.stderr
    argv[6] = "--iface=absent"
    res = subprocess.run(argv[:7] + [str(tmp_path)], input="{}", capture_output=True, text=True)
    assert res.returncode == 2 and "for iface absent" in res.stderr


def test_the_record_writer_refuses_a_missing_record_and_a_value_with_a_newline(tmp_path):
    res = write_secrets([tmp_path], {"node.session.auth.password": "newsecret12345"})
    assert res.returncode == 2 and "no node record" in res.stderr
    (tmp_path / CHAPT).mkdir()
    (tmp_path / CHAPT / "10.77.0.11,3260").write_text(RECORD.format(iqn=CHAPT))
    res = write_secrets([tmp_path], {"node.session.auth.password": "x\nnode.startup = manual"})
    assert res.returncode != 0 and "manual" not in (tmp_path / CHAPT / "10.77.0.11,3260").read_text()


def test_a_record_made_without_the_tpg_tag_is_made_again_tagged_before_a_login():
    """A record from before the fabric tagged its records (node.tpgt = -1: the one file ADDRESS,PORT, which another
    iface's record of the target replaces) is deleted and made again with the tag, then set and logged in."""
    runner = ScriptedRunner([
        step(SESSIONS, "session_none.txt"),
        step(node(XFS), stdout=data("iscsi", "node_default.txt")),
        step(node(XFS, "-I", "default", "-o", "delete")),
        step(node_new(XFS), stdout=data("iscsi", "node_new.txt")),
        step(update(XFS, "node.startup", "automatic", "node.session.auth.authmethod", "None")),
        step(node(XFS, "--login"), stdout=data("iscsi", "login_ok.stdout")),
        step(["udevadm", "wait", "--timeout=60", f"/dev/disk/by-path/ip-{PORTAL}-iscsi-{XFS}-lun-0"]),
        step(["readlink", "-e", f"/dev/disk/by-path/ip-{PORTAL}-iscsi-{XFS}-lun-0"], stdout="/dev/sda\n"),
        step(SESSIONS, stdout=data("iscsi", "session_p3.txt")),
    ])
    res = ensure_session(runner, portal=PORTAL, target_iqn=XFS, sleep=lambda s: None)
    runner.assert_done()
    assert res["record_created"]
    assert res["commands"][:2] == [f"iscsiadm -m node -T {XFS} -p {PORTAL} -I default -o delete",
                                   f"iscsiadm -m node -T {XFS} -p {PORTAL},1 -o new"]


def test_a_tagged_record_and_an_untagged_one_with_a_session_are_left_as_they_are():
    tagged = plan_session(session_spec(portal=PORTAL, target_iqn=XFS),
                          SessionLive(None, parse_node_record(data("iscsi", "node_default_tagged.txt"))))
    assert [step.kind for step in tagged.steps] == ["login"]  # its settings are the wanted ones: no delete, no new
    running = plan_session(session_spec(portal=PORTAL, target_iqn=XFS),
                           SessionLive({"sid": 3}, parse_node_record(data("iscsi", "node_default.txt"))))
    assert "delete_record" not in [step.kind for step in running.steps]  # what its session runs on stays


def _sysfs(root, sid: int, target: str, address: str, port: int, disks: dict) -> None:
    """A session in a fake /sys (and its disks' nodes in a fake /dev): disks {lun: (name, size in sectors)}."""
    session = root / "sys" / "class" / "iscsi_session" / f"session{sid}"
    session.mkdir(parents=True)
    (session / "targetname").write_text(target + "\n")
    connection = root / "sys" / "class" / "iscsi_connection" / f"connection{sid}:0"
    connection.mkdir(parents=True)
    (connection / "persistent_address").write_text(address + "\n")
    (connection / "persistent_port").write_text(f"{port}\n")
    for lun, (name, size) in disks.items():
        block = session / "device" / f"target{sid + 5}:0:0" / f"{sid + 5}:0:0:{lun}" / "block" / name
        block.mkdir(parents=True)
        (block / "size").write_text(f"{size}\n")
        (root / "dev").mkdir(exist_ok=True)
        (root / "dev" / name).write_text("")


def test_the_kernels_disk_of_a_sessions_lun_is_read_from_sysfs_before_udev(tmp_path):
    """devices.DISK_OF_SESSION (what a job's attach waits for): the session to that target at that portal, that
    LUN's disk once it has a capacity, and its device node; never another portal's session of the same target,
    another target's, or LUN 10 for LUN 0."""
    from fabric_core.node.devices import disk_argv  # noqa: PLC0415

    _sysfs(tmp_path, 1, EXT4, "10.77.0.12", 3260, {0: ("sdb", 2048)})  # the same target at another portal
    _sysfs(tmp_path, 2, XFS, "10.77.0.11", 3260, {0: ("sdc", 2048)})  # another target at the portal
    _sysfs(tmp_path, 3, EXT4, "10.77.0.11", 3260, {10: ("sdd", 2048), 0: ("sde", 4096)})
    _sysfs(tmp_path, 4, CHAPT, "fd00::11", 3260, {0: ("sdf", 0)})  # scanned, its capacity not read yet

    def disk(portal, target, lun=0):
        res = subprocess.run(disk_argv(portal, target, lun, 1, root=str(tmp_path)), capture_output=True, text=True,
                             timeout=30, check=False)
        return res.returncode, res.stdout.strip()

    assert disk(PORTAL, EXT4) == (0, "/dev/sde")
    assert disk(PORTAL, EXT4, 10) == (0, "/dev/sdd")
    assert disk("10.77.0.12:3260", EXT4) == (0, "/dev/sdb")
    assert disk(PORTAL, XFS) == (0, "/dev/sdc")
    assert disk("[fd00::11]:3260", CHAPT) == (1, "")  # no capacity yet: waited its second, then gave up
    (tmp_path / "sys/class/iscsi_session/session4/device/target9:0:0/9:0:0:0/block/sdf/size").write_text("8\n")
    assert disk("[fd00::11]:3260", CHAPT) == (0, "/dev/sdf")
    assert disk(PORTAL, CHAPT)[0] == 1  # no session there


def test_a_disk_that_never_appears_times_out_naming_the_lun_target_and_portal():
    from fabric_core.node.devices import disk_argv, wait_for_disk  # noqa: PLC0415

    runner = ScriptedRunner([step(disk_argv(PORTAL, EXT4, 0, 2), rc=1)])
    with pytest.raises(DeviceTimeout, match=f"kernel's disk of LUN 0 of {EXT4} at {PORTAL} did not appear within 2s"):
        wait_for_disk(runner, portal=PORTAL, target_iqn=EXT4, timeout=2)
    runner.assert_done()
