"""make bench-storm's pure parts (issue 29): the readers of configfs's ACL info, `iscsiadm -m session -P 1`,
`iscsiadm --login` and `iscsiadm -m iface` (their texts as recorded on the lab), the run's names and CHAP
credentials, the medians and the ratio, and the programs sent to the nodes (no secret in any argv)."""

from __future__ import annotations

import ast

from support import load_bench

sb = load_bench("storm_bench")

T = "iqn.2026-11.io.fabric.bench:benchstorm"

# storage1, an ACL of the fabric's export with gpu1 logged in, and one of the bench's without a session (the lab's)
INFO_LOGGED_IN = """InitiatorName: iqn.2026-11.io.fabric.lab:gpu1
InitiatorAlias: gpu1
LIO Session ID: 2   ISID: 0x00 02 3d 00 00 01  TSIH: 2  SessionType: Normal
Session State: TARG_SESS_STATE_LOGGED_IN
---------------------[iSCSI Session Values]-----------------------
  CmdSN/WR  :  CmdSN/WC  :  ExpCmdSN  :  MaxCmdSN  :     ITT    :     TTT
 0x00000040   0x00000040   0x0000009e   0x000000dd   0x00000065   0x00000104
----------------------[iSCSI Connections]-------------------------
CID: 0  Connection State: TARG_CONN_STATE_LOGGED_IN
   Address 10.77.0.21 TCP  StatSN: 0xd303703d
"""
INFO_NONE = "No active iSCSI Session for Initiator Endpoint: iqn.2026-11.io.fabric.bench:benchstorm.i00\n"

# gpu1: `iscsiadm -m session -P 1` with the fabric's export and one bench iface logged in (trimmed to two sessions)
SESSIONS = f"""Target: iqn.2026-11.io.fabric.lab:storage1-exports (non-flash)
\tCurrent Portal: 10.77.0.11:3260,1
\tPersistent Portal: 10.77.0.11:3260,1
\t\t**********
\t\tInterface:
\t\t**********
\t\tIface Name: default
\t\tIface Transport: tcp
\t\tIface Initiatorname: iqn.2026-11.io.fabric.lab:gpu1
\t\tIface IPaddress: 10.77.0.21
\t\tIface HWaddress: default
\t\tIface Netdev: default
\t\tSID: 1
\t\tiSCSI Connection State: LOGGED IN
\t\tiSCSI Session State: LOGGED_IN
\t\tInternal iscsid Session State: NO CHANGE
Target: {T} (non-flash)
\tCurrent Portal: 10.77.0.11:3260,1
\tPersistent Portal: 10.77.0.11:3260,1
\t\t**********
\t\tInterface:
\t\t**********
\t\tIface Name: benchstorm01
\t\tIface Transport: tcp
\t\tIface Initiatorname: iqn.2026-11.io.fabric.bench:benchstorm.i01
\t\tIface IPaddress: 10.77.0.21
\t\tIface HWaddress: default
\t\tIface Netdev: default
\t\tSID: 68
\t\tiSCSI Connection State: LOGGED IN
\t\tiSCSI Session State: LOGGED_IN
\t\tInternal iscsid Session State: NO CHANGE
"""

# gpu1: `iscsiadm -m node -T T -p P --login` (stdout and stderr) with benchstorm00's password made wrong (rc 24)
LOGIN = f"""Login to [iface: benchstorm01, target: {T}, portal: 10.77.0.11,3260] successful.
iscsiadm: Could not login to [iface: benchstorm00, target: {T}, portal: 10.77.0.11,3260].
iscsiadm: initiator reported error (24 - iSCSI login failed due to authorization failure)
iscsiadm: Could not log into all portals
"""

IFACES = """benchstorm99 tcp,<empty>,<empty>,<empty>,iqn.2026-11.io.fabric.bench:benchstorm.i99
default tcp,<empty>,<empty>,<empty>,<empty>
benchstorm7x tcp,<empty>,<empty>,<empty>,<empty>
iser iser,<empty>,<empty>,<empty>,<empty>
benchstorm03 tcp,<empty>,<empty>,<empty>,iqn.2026-11.io.fabric.bench:benchstorm.i03
"""


def test_an_acl_counts_only_with_a_logged_in_session():
    assert sb.acl_logged_in(INFO_LOGGED_IN)
    assert not sb.acl_logged_in(INFO_NONE)
    assert not sb.acl_logged_in("")


def test_sessions_are_read_per_iface_of_the_target_only():
    got = sb.sessions_of(SESSIONS, T)
    assert got == {"benchstorm01": {"initiator": "iqn.2026-11.io.fabric.bench:benchstorm.i01", "state": "LOGGED_IN"}}
    assert sb.sessions_of(SESSIONS, T + "x") == {}
    assert sb.sessions_of("iscsiadm: No active sessions.\n", T) == {}


def test_login_output_names_the_failed_iface():
    said = sb.login_lines(LOGIN)
    assert said["ok"] == ["benchstorm01"]
    assert said["failed"] == ["benchstorm00"]
    assert any("authorization failure" in e for e in said["errors"])
    assert sb.login_lines(f"Logging in to [iface: benchstorm05, target: {T}, portal: 10.77.0.11,3260]\n")["tried"] \
        == ["benchstorm05"]


def test_only_the_bench_ifaces_are_picked_for_deletion():
    assert sb.bench_ifaces(IFACES, "benchstorm") == ["benchstorm03", "benchstorm99"]
    assert sb.bench_ifaces(IFACES, "other") == []


def test_credentials_one_iface_and_name_each_split_over_the_gpu_nodes_with_valid_chap():
    from fabric_core.base.rules import LIO, parse_chap

    creds = sb.credentials(64)
    assert [c["node"] for c in creds.values()].count("gpu1") == 32
    assert [c["node"] for c in creds.values()].count("gpu2") == 32
    assert len({c["iface"] for c in creds.values()}) == 64
    assert len({c["initiator"] for c in creds.values()}) == 64
    assert len({c["password"] for c in creds.values()}) == 64  # each its own secret
    for c in creds.values():
        assert c["iface"].startswith(sb.NAME) and c["initiator"].startswith(sb.TARGET + ".")
        # the fabric's own rule on the target side: 12-16 characters, the two secrets different
        assert parse_chap({k: c[k] for k in LIO.names}, LIO) is not None
        assert 12 <= len(c["password"]) <= 16 and c["password"] != c["mutual_password"]
    assert sb.credentials(64)[0]["password"] != creds[0]["password"]  # fresh for every run


def test_summary_takes_medians_and_divides_storm_by_one():
    runs = [{"one_s": 1.0, "storm64_s": 10.0, "storm_gpu1_s": 9.0, "one_disk_s": None},
            {"one_s": 2.0, "storm64_s": 30.0, "storm_gpu1_s": 29.0, "one_disk_s": 1.5},
            {"one_s": 4.0, "storm64_s": 20.0, "storm_gpu1_s": 19.0, "one_disk_s": 2.5}]
    got = sb.summarize(runs)
    assert got["figures"]["storm_one_s"] == 2.0
    assert got["figures"]["storm64_s"] == 20.0
    assert got["figures"]["storm_gpu1_s"] == 19.0
    assert "storm_one_disk_s" not in got["figures"]  # not measured in every round: no median
    assert got["ratios"] == {"storm64_over_one": 10.0}


def test_the_node_programs_compile_and_pass_no_secret_in_argv():
    for body in (sb.NODE, sb.STORAGE_PROGRAM):
        source = sb.program(body)
        ast.parse(source)
        assert "password" not in "".join(line for line in source.splitlines() if "run([" in line)
    # the program and every command (secrets included) go on the ssh's stdin; its command line is fixed
    assert "stdin" in sb.Remote.BOOT and "password" not in sb.Remote.BOOT
