"""One reader cannot stop the others (issue 26, item 8), attacked below the file system as a granted host's
root would: SCSI commands sent with SG_IO straight to the iSCSI disk of a version on gpu1, read back through
other paths: gpu2's reads of the same version (the disk with O_DIRECT, a file of the mounted version), configfs
on storage1 (the backstore's pr/ files and attrib/emulate_pr) and `fabricctl status`.

A version exported by the new code is needed (``published``'s shared@v1 may have been exported before read-only
backstores refused reservations): the file seals a version of its own of the shared dataset, publishes it to both
GPU nodes, and unpublishes and destroys it at the end. The writer's side uses a small checkpoint volume of its
own (destroyed at the end). Whatever the attack holds is released in a `finally`, so that a failing control
never leaves the lab with a reserved LUN.
"""

from __future__ import annotations

import json
import uuid

import pytest
from conftest import SHARED, run_python, step

FCTL_BASE = "iqn.2026-11.io.fabric.lab.fabricctl"  # fabricctl's iqn_base on the lab (its targets: FCTL_BASE:NAME)
CONFIGFS_CORE = "/sys/kernel/config/target/core"

# SG_IO on the SCSI disk(s) of one iSCSI target: argv[1] the target IQN, argv[2] JSON list of commands
# [{"name", "cdb": hex, "out": hex (data out) or "", "in": bytes to read}]; prints, per disk and command, the
# SCSI status and sense (key, asc, ascq) and the data read, as JSON. Root has CAP_SYS_RAWIO: every command is
# let through to the target, as an attacker's would be. The disk is opened read-only (a read-only export's is).
SG = r'''
import ctypes, fcntl, glob, json, os, re, sys
SG_IO, NONE, TO_DEV, FROM_DEV = 0x2285, -1, -2, -3

class Hdr(ctypes.Structure):
    _fields_ = [("interface_id", ctypes.c_int), ("dxfer_direction", ctypes.c_int), ("cmd_len", ctypes.c_ubyte),
                ("mx_sb_len", ctypes.c_ubyte), ("iovec_count", ctypes.c_ushort), ("dxfer_len", ctypes.c_uint),
                ("dxferp", ctypes.c_void_p), ("cmdp", ctypes.c_void_p), ("sbp", ctypes.c_void_p),
                ("timeout", ctypes.c_uint), ("flags", ctypes.c_uint), ("pack_id", ctypes.c_int),
                ("usr_ptr", ctypes.c_void_p), ("status", ctypes.c_ubyte), ("masked_status", ctypes.c_ubyte),
                ("msg_status", ctypes.c_ubyte), ("sb_len_wr", ctypes.c_ubyte), ("host_status", ctypes.c_ushort),
                ("driver_status", ctypes.c_ushort), ("resid", ctypes.c_int), ("duration", ctypes.c_uint),
                ("info", ctypes.c_uint)]

def sg(fd, cdb, out=b"", inlen=0):
    cdb_buf = ctypes.create_string_buffer(cdb, len(cdb))
    sense = ctypes.create_string_buffer(64)
    data = ctypes.create_string_buffer(out, len(out)) if out else ctypes.create_string_buffer(max(inlen, 1))
    h = Hdr(interface_id=ord("S"), dxfer_direction=TO_DEV if out else (FROM_DEV if inlen else NONE),
            cmd_len=len(cdb), mx_sb_len=64, dxfer_len=len(out) or inlen,
            dxferp=ctypes.cast(data, ctypes.c_void_p) if (out or inlen) else None,
            cmdp=ctypes.cast(cdb_buf, ctypes.c_void_p), sbp=ctypes.cast(sense, ctypes.c_void_p), timeout=20000)
    fcntl.ioctl(fd, SG_IO, h)
    sb = sense.raw[:h.sb_len_wr]
    key = asc = ascq = None
    if sb and sb[0] & 0x7f in (0x70, 0x71):
        key, asc, ascq = sb[2] & 0xf, sb[12], sb[13]
    elif sb and sb[0] & 0x7f in (0x72, 0x73):
        key, asc, ascq = sb[1] & 0xf, sb[2], sb[3]
    return {"status": h.status, "host": h.host_status, "driver": h.driver_status, "key": key, "asc": asc,
            "ascq": ascq, "data": data.raw[:inlen - h.resid].hex() if inlen else ""}

target, commands = sys.argv[1], json.loads(sys.argv[2])
disks = []
for blk in glob.glob("/sys/block/sd*"):  # a SCSI disk whose device path runs through a session of the target
    session = [p for p in os.path.realpath(blk + "/device").split("/") if re.fullmatch(r"session\d+", p)]
    if session and open(f"/sys/class/iscsi_session/{session[0]}/targetname").read().strip() == target:
        disks.append("/dev/" + os.path.basename(blk))
out = {}
for disk in sorted(disks):
    fd = os.open(disk, os.O_RDONLY | os.O_NONBLOCK)
    try:
        out[disk] = {c["name"]: sg(fd, bytes.fromhex(c["cdb"]), bytes.fromhex(c.get("out", "")), c.get("in", 0))
                     for c in commands}
    finally:
        os.close(fd)
print(json.dumps(out))
'''

KEY = "00000000fab12026"  # the attacker's SPC-3 reservation key
RESERVE6 = {"name": "RESERVE(6)", "cdb": "160000000000"}
RESERVE10 = {"name": "RESERVE(10)", "cdb": "56000000000000000000"}
RELEASE6 = {"name": "RELEASE(6)", "cdb": "170000000000"}
# PERSISTENT RESERVE OUT, 24 bytes of parameters: REGISTER (service action 0) the key; RESERVE (1), type 3
# (Exclusive Access: nobody else reads) with it; REGISTER AND IGNORE EXISTING KEY (6) with key 0 unregisters.
PR_REGISTER = {"name": "PR OUT REGISTER", "cdb": "5f000000000000001800", "out": "00" * 8 + KEY + "00" * 8}
PR_RESERVE = {"name": "PR OUT RESERVE", "cdb": "5f010300000000001800", "out": KEY + "00" * 16}
PR_UNREGISTER = {"name": "PR OUT UNREGISTER", "cdb": "5f060000000000001800", "out": "00" * 24}
# the same REGISTER without its data-out phase: past the write protection, it meets the reservation code itself
PR_REGISTER_NO_DATA = {"name": "PR OUT REGISTER (no data)", "cdb": "5f000000000000001800"}
PR_READ_KEYS = {"name": "PR IN READ KEYS", "cdb": "5e000000000000002000", "in": 32}
ATTACK = [RESERVE6, RESERVE10, PR_REGISTER, PR_RESERVE, PR_REGISTER_NO_DATA, PR_READ_KEYS]
GOOD, CHECK_CONDITION, RESERVATION_CONFLICT = 0x00, 0x02, 0x18
ILLEGAL_REQUEST, DATA_PROTECT = 0x05, 0x07
INVALID_OPCODE = 0x20  # ASC: INVALID COMMAND OPERATION CODE


def scsi(host, target: str, commands: list[dict]) -> dict:
    """{disk: {command name: {status, key, asc, ascq, data}}} of the commands sent to the target's disks."""
    res = run_python(host, SG, target, json.dumps(commands))
    assert res.rc == 0, res.stderr
    found = json.loads(res.stdout)
    assert found, f"{host.backend.hostname} has no disk of {target}"
    return found


# the SCSI disks (sdX) of one iSCSI target on a GPU node: those whose device path runs through its session
DISKS = ("for b in /sys/block/sd*; do s=$(readlink -f $b/device | grep -o 'session[0-9]*' | head -1); "
         "[ -n \"$s\" ] && [ \"$(cat /sys/class/iscsi_session/$s/targetname)\" = %s ] && echo ${b##*/}; done; true")


def reservation_files(storage, backstore: str) -> dict:
    """configfs' pr/ files and attrib/emulate_pr of a backstore on the storage node, as text."""
    out = storage.check_output(
        f"cd {CONFIGFS_CORE}/*/{backstore} && for f in attrib/emulate_pr pr/res_holder pr/res_type "
        "pr/res_pr_registered_i_pts; do printf '%s=%s\\n' \"$f\" \"$(tr '\\n' ' ' < $f)\"; done")
    return {k: v.strip() for k, v in (line.split("=", 1) for line in out.splitlines())}


def reservations_check(fctl) -> dict:
    res = fctl("status", "--json")
    assert res.rc in (0, 1, 2, 3), res.stderr  # a health check's statuses (other checks may be anything)
    return next(c for c in json.loads(res.stdout)["checks"] if c["name"] == "reservations")


def reads(host, target: str, path: str) -> None:
    """The host reads the version below its page cache: every disk of the target (4 MiB, O_DIRECT) and a file of
    the mounted version (O_DIRECT)."""
    disks = host.check_output(DISKS, target).split()
    assert disks, f"{host.backend.hostname} has no disk of {target}"
    for disk in disks:
        res = host.run(f"dd if=/dev/{disk} of=/dev/null bs=1M count=4 iflag=direct")
        assert res.rc == 0, f"{host.backend.hostname}: reading /dev/{disk} failed: {res.stderr}"
    res = host.run(f"dd if={path} of=/dev/null bs=4096 iflag=direct")
    assert res.rc == 0, f"{host.backend.hostname}: reading {path} failed: {res.stderr}"


@pytest.fixture(scope="module")
def version(hosts, storage, fctl, published):
    """A version of the shared dataset of this file's own, exported by the code under test to both GPU nodes."""
    name = f"pr-{uuid.uuid4().hex[:6]}"
    fctl.json("dataset", "seal", SHARED, name, "--note", "test_security_reservations")
    try:
        res = fctl("publish", f"{SHARED}@{name}", "--to", "gpu1,gpu2")
        assert res.rc == 0, res.stderr
        yield name
    finally:
        fctl("unpublish", f"{SHARED}@{name}", "--force")
        res = fctl("dataset", "destroy", f"{SHARED}@{name}", "--yes")
        assert res.rc == 0, res.stderr


def test_a_reader_cannot_reserve_a_read_only_export(hosts, storage, fctl, version):
    """gpu1 (granted, root) sends SCSI-2 RESERVE(6)/(10) and SPC-3 PERSISTENT RESERVE OUT/IN to the version's
    disk: each is refused, nothing is held, and gpu2 still reads the same version."""
    gpu1, gpu2 = hosts["gpu1"], hosts["gpu2"]
    target = f"{FCTL_BASE}:ds.{SHARED}.{version}"
    backstore = next(b for b in storage.check_output(f"ls {CONFIGFS_CORE}/*/").split() if b.endswith(
        f"{SHARED}.{version}"))
    files = reservation_files(storage, backstore)
    assert files["attrib/emulate_pr"] == "0", files
    step(f"gpu1 sends {', '.join(c['name'] for c in ATTACK)} to {target}")
    try:
        answers = scsi(gpu1, target, ATTACK)
    finally:
        scsi(gpu1, target, [RELEASE6, PR_UNREGISTER])  # whatever the attack got, it gives back
    for disk, got in answers.items():
        for name, a in got.items():
            assert a["status"] == CHECK_CONDITION, f"{disk} {name}: SCSI status {a['status']:#x} ({a})"
            assert a["key"] in (ILLEGAL_REQUEST, DATA_PROTECT), f"{disk} {name}: {a}"
        for name in ("RESERVE(6)", "RESERVE(10)", "PR OUT REGISTER (no data)", "PR IN READ KEYS"):
            assert (got[name]["key"], got[name]["asc"]) == (ILLEGAL_REQUEST, INVALID_OPCODE), f"{disk} {name}: {got}"
    step("read back: configfs holds nothing, gpu2 and gpu1 read, status names nothing")
    files = reservation_files(storage, backstore)
    assert files["pr/res_holder"] == "SPC_RESERVATIONS_DISABLED", files
    assert "Node:" not in files["pr/res_pr_registered_i_pts"], files
    reads(gpu2, target, f"/datasets/{SHARED}/{version}/a/f20")
    reads(gpu1, target, f"/datasets/{SHARED}/{version}/a/f20")
    check = reservations_check(fctl)
    assert check["state"] in ("OK", "WARNING"), check  # WARNING: exports made before the change, named
    assert not [b for b, d in check["details"].items() if d["holder"] or d["registrations"]], check
    assert check["details"][backstore]["emulate_pr"] == 0, check


@pytest.fixture(scope="module")
def volume(hosts, storage, fctl, converged):
    """A small checkpoint volume of this file's own, written by gpu1."""
    job = f"pr{uuid.uuid4().hex[:6]}"
    fctl.json("checkpoint", "volume", "create", job, "--size", "64M", "--writer", "gpu1")
    try:
        yield job
    finally:
        res = fctl("checkpoint", "volume", "destroy", job, "--yes")
        assert res.rc == 0, res.stderr


def test_the_writer_of_a_checkpoint_volume_may_reserve_it_and_status_names_it(hosts, storage, fctl, volume):
    """A writable volume has one ACL, its writer's: the writer's RESERVE(6), then (released: LIO refuses SPC-3
    commands while an SPC-2 reservation is held) its PR OUT REGISTER succeed: it may hold its own volume.
    configfs shows each, `fabricctl status` names each as the writer's (OK), and they are gone once released."""
    gpu1 = hosts["gpu1"]
    target = f"{FCTL_BASE}:ck.{volume}.rw"
    backstore = next(b for b in storage.check_output(f"ls {CONFIGFS_CORE}/*/").split() if b.endswith(
        f"{volume}.rw"))
    assert reservation_files(storage, backstore)["attrib/emulate_pr"] == "1"
    try:
        for command, shown in ((RESERVE6, "SPC-2 Reservation: iSCSI Initiator: "), (PR_REGISTER, KEY)):
            scsi(gpu1, target, [RELEASE6])
            got = scsi(gpu1, target, [command])
            if command is RESERVE6:  # (REGISTER registers, but may answer NOT READY when LIO cannot write its
                # APTPL file under db_root /etc/target, absent on the lab: configfs is what is read back)
                assert all(a[command["name"]]["status"] == GOOD for a in got.values()), got
            files = reservation_files(storage, backstore)
            assert shown in files["pr/res_holder"] + files["pr/res_pr_registered_i_pts"].lower(), files
            check = reservations_check(fctl)
            mine = check["details"][backstore]
            assert mine["holder"] or mine["registrations"], check
            # OK, or WARNING for another export made before read-only exports refused reservations
            assert check["state"] in ("OK", "WARNING") and "its writer" in check["summary"], check
    finally:
        scsi(gpu1, target, [RELEASE6, PR_UNREGISTER])
    files = reservation_files(storage, backstore)
    assert files["pr/res_holder"].startswith("No SPC-"), files
    assert "Node:" not in files["pr/res_pr_registered_i_pts"], files
