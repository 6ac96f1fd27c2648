"""CHAP secrets at rest on a storage node (issue 26, item 9): configfs shows each ACL's secrets in files the
kernel makes mode 0644 (`/sys/kernel/config/target/iscsi/IQN/tpgt_1/acls/INITIATOR/auth/password`,
`password_mutual`, the discovery's under `iscsi/discovery_auth`); the lio_target role closes the target's tree
(`/sys/kernel/config/target`, mode 0700: configfs keeps a chmod in the directory's entry, and no path below it
resolves for an account that cannot search it), and LIO's restore unit closes it again each time it restores
the configuration (its drop-in's ExecStartPost: at boot, the LIO modules are loaded afresh with 0755). The
saved configuration (`/etc/rtslib-fb-target/saveconfig.json`, every secret in it) is 0600 in a 0700
directory.

The attack that must fail: a local account on storage1 that is not root (a throwaway user, removed at the end)
lists and reads every ACL's auth files and the saved configuration; each read is refused. Read back through
another path: the modes by `stat`, and the same files read by root (they exist and hold the lab's secrets,
so the refusal is not that of a missing file). Then the tree is opened again (0755, as a fresh module load
leaves it) and the restore unit restarted, as a boot would run it (not a reboot: test_reboot covers boots):
the unit closes it, and every session of before comes back. No secret is printed: contents are compared on
the node's side or by digest.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
import uuid

import pytest

CONFIGFS = "/sys/kernel/config/target"
ISCSI = f"{CONFIGFS}/iscsi"
SAVE_DIR = "/etc/rtslib-fb-target"
SAVE_FILE = f"{SAVE_DIR}/saveconfig.json"
RESTORE_UNIT = "rtslib-fb-targetctl.service"
SESSIONS_BACK_S = 180  # open-iscsi logs in again within its replacement timeout (the role's 120 s)


def sh(host, command: str):
    return host.run(command)


def as_user(host, user: str, command: str):
    """COMMAND run by USER (not root) through su, as a local account would."""
    return host.run(f"su -s /bin/sh {user} -c {shlex.quote(command)}")


def auth_files(host) -> list[str]:
    """Every CHAP secret file of every LIO target's ACL and of the discovery (root lists them)."""
    res = sh(host, f"find {ISCSI} -path '*/auth/*' \\( -name password -o -name password_mutual \\) -type f")
    assert res.rc == 0, res.stderr
    files = sorted(res.stdout.split())
    assert any("/acls/" in f for f in files), f"no ACL's auth files under {ISCSI}: {files}"
    return files


def sessions(host) -> set[str]:
    """The ACLs (target/tpgt_N/acls/INITIATOR, under target/iscsi) with a logged-in session, as root reads their
    `info` (dynamic_sessions lists only the sessions of ACLs made on the fly, none here)."""
    res = sh(host, f"grep -L 'No active iSCSI Session' {ISCSI}/iqn.*/tpgt_*/acls/*/info || true")
    return {line[len(ISCSI) + 1:-len("/info")] for line in res.stdout.split() if line.endswith("/info")}


@pytest.fixture(scope="module")
def intruder(storage):
    """A throwaway local account on storage1 (no home, not root, no group of root's), removed afterwards."""
    user = f"fabsec{uuid.uuid4().hex[:6]}"
    storage.run_expect([0], f"useradd --no-create-home --shell /bin/sh --user-group {user}")
    try:
        assert as_user(storage, user, "id -u").stdout.strip() not in ("", "0")
        yield user
    finally:
        storage.run(f"pkill -KILL -u {user}; userdel {user}")
        assert storage.run(f"getent passwd {user}").rc != 0, f"{user} is still an account of storage1"


def test_the_target_tree_and_the_saved_configuration_are_root_only(storage):
    for path, mode in ((CONFIGFS, "700"), (SAVE_DIR, "700"), (SAVE_FILE, "600")):
        got = sh(storage, f"stat -c '%a %U %G' {path}").stdout.split()
        assert got == [mode, "root", "root"], f"{path}: {got}"
    # the files themselves stay as the kernel makes them (0644): the directory above is what closes them
    modes = {sh(storage, f"stat -c %a {shlex.quote(f)}").stdout.strip() for f in auth_files(storage)}
    assert modes <= {"644", "600"}, modes


def test_a_local_account_cannot_list_or_read_any_chap_secret(storage, intruder, lab_secrets):
    files = auth_files(storage)
    # root reads them: they exist, and those of the lab's ACLs hold the lab's secrets
    digests = {hashlib.sha256(s.encode()).hexdigest() for s in lab_secrets}
    read = sh(storage, "for f in " + " ".join(shlex.quote(f) for f in files)
              + "; do head -c 100 \"$f\" | tr -d '\\n' | sha256sum | cut -d' ' -f1; done")
    assert read.rc == 0 and digests & set(read.stdout.split()), "root read none of the lab's secrets in configfs"
    saved = sh(storage, f"python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d[\"targets\"]))' "
                        f"{SAVE_FILE}")
    assert saved.rc == 0 and int(saved.stdout) >= 1, saved.stderr
    # the attack: list the targets and ACLs, read every secret file and the saved configuration
    acls = sorted({f.split("/auth/")[0].rsplit("/acls/", 1)[0] + "/acls" for f in files if "/acls/" in f})
    for path in [CONFIGFS, ISCSI, *acls]:
        res = as_user(storage, intruder, f"ls {shlex.quote(path)}")
        assert res.rc != 0 and "Permission denied" in res.stderr, f"{intruder} listed {path}: rc {res.rc}"
    for path in [*files, SAVE_FILE]:
        res = as_user(storage, intruder, f"cat {shlex.quote(path)}")
        assert res.rc != 0 and "Permission denied" in res.stderr and not res.stdout, \
            f"{intruder} read {path}: rc {res.rc}, {len(res.stdout)} bytes"
    # and nothing below the tree is found by a walk from its top
    walk = as_user(storage, intruder, "find /sys/kernel/config -name 'password*' 2>/dev/null; true")
    assert walk.stdout.strip() == "", walk.stdout


def test_the_restore_unit_closes_the_tree_again(storage, intruder):
    """The LIO restore, as at boot, on a tree left open (as a fresh module load leaves it): closed once the
    configuration is back, and every session comes back by itself."""
    status = json.loads(storage.run("fabricctl status --json").stdout or "{}")
    saved = {c["name"]: c["state"] for c in status.get("checks", [])}.get("lio_saved")
    assert saved == "OK", f"the live LIO configuration is not the saved one (lio_saved {saved}): a restore would " \
                          "change it"
    before = sessions(storage)
    assert before, "no logged-in session on storage1 to see come back"
    storage.run_expect([0], f"chmod 0755 {CONFIGFS}")
    try:
        assert as_user(storage, intruder, f"ls {ISCSI}").rc == 0  # open, as after a fresh module load
        restart = storage.run(f"systemctl restart {RESTORE_UNIT}")
        assert restart.rc == 0, restart.stderr
        assert storage.run(f"systemctl is-active {RESTORE_UNIT}").stdout.strip() == "active"
        assert sh(storage, f"stat -c %a {CONFIGFS}").stdout.strip() == "700"
        res = as_user(storage, intruder, f"ls {ISCSI}")
        assert res.rc != 0 and "Permission denied" in res.stderr
    finally:
        storage.run(f"chmod 0700 {CONFIGFS}")
        deadline = time.monotonic() + SESSIONS_BACK_S
        after = sessions(storage)
        while not before <= after and time.monotonic() < deadline:
            time.sleep(2)
            after = sessions(storage)
    assert before <= after, f"sessions not back within {SESSIONS_BACK_S} s of the restore: {sorted(before - after)}"
