"""Role iscsi_initiator on gpu1 against a real read-only LIO export on storage1.

storage1 gets its own file-backed pool (no real disks), two zvols with an ext4 and an xfs file
system and known content, exported read-only with raw rtslib (as test_lab.py does), plus a CHAP
export. gpu1 runs the role through ansible-playbook; every check reads gpu1 separately.

gpu1's initiator name is left as the lab set it (passed as iscsi_initiator_iqn): the lab is
shared, and other tests' ACLs name gpu1 by that name. The default name is checked with --check.

The exports are made once for the file and the role converged once; its negative cases (wrong CHAP,
invalid IQN) reuse them. The role's runs here list only this file's exports, so on a converged lab
they take gpu1's site mounts away (the role's purge); the fixture gives them back at the end by
running the site's GPU layer for gpu1.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from conftest import EXPORT, REPO, ansible_playbook, run, run_python, site_converged_here, step

PLAYBOOK = [{"hosts": "gpu1", "gather_facts": False, "roles": ["iscsi_initiator"]}]

UNEXPORT = r'''
import json, sys, time
from rtslib_fb import FabricModule, RTSRoot
p = json.loads(sys.argv[1])
for t in list(FabricModule("iscsi").targets):
    if t.wwn in p["iqns"]:
        t.delete()
for so in list(RTSRoot().storage_objects):
    if so.name in p["names"]:
        so.delete()
'''


def initiator_name(host) -> str:
    text = host.file("/etc/iscsi/initiatorname.iscsi").content_string
    return next(line.split("=", 1)[1].strip() for line in text.splitlines() if line.startswith("InitiatorName="))


def recap(output: str, host: str = "gpu1") -> dict:
    match = re.search(rf"^{host}\s*:\s*(.*)$", output, re.M)
    assert match, f"no PLAY RECAP line for {host}:\n{output[-3000:]}"
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(1))}


@pytest.fixture(scope="module")
def exports(hosts, lab, zfs_loaded):
    """A file-backed pool with ext4, xfs and CHAP zvols exported read-only to gpu1; removed afterwards, and
    gpu1's site mounts given back when the site is converged on this lab."""
    uid = uuid.uuid4().hex[:6]
    storage, gpu = hosts["storage1"], hosts["gpu1"]
    pool = f"hd_it{uid}"
    img = f"/var/tmp/{pool}.img"
    portal = lab.addr("storage1")
    initiator = initiator_name(gpu)
    made = {"iqns": [], "names": []}
    saved = {f: gpu.check_output(f"base64 -w0 {f}") for f in ("/etc/iscsi/initiatorname.iscsi",
                                                              "/etc/iscsi/iscsid.conf")}
    step(f"storage1: file-backed pool {pool} with ext4, xfs and chap zvols")
    storage.run_expect([0], f"modprobe zfs && truncate -s 1G {img} && zpool create -O fabric:managed=true {pool} {img}")
    info = {"pool": pool, "portal": portal, "initiator": initiator, "uid": uid, "chap_password": f"hdchap{uid}secret"}
    try:
        for fs, size in (("ext4", "64M"), ("xfs", "320M"), ("chap", "64M")):
            vol = f"{pool}/{fs}"
            storage.run_expect([0], f"zfs create -V {size} {vol} && udevadm settle && test -b /dev/zvol/{vol}")
            mkfs = "mkfs.xfs -q" if fs == "xfs" else "mkfs.ext4 -q"
            storage.run_expect([0], f"{mkfs} /dev/zvol/{vol} && mkdir -p /mnt/{pool} "
                                    f"&& mount /dev/zvol/{vol} /mnt/{pool} "
                                    f"&& echo content-{fs}-{uid} > /mnt/{pool}/hello.txt "
                                    f"&& umount /mnt/{pool} && udevadm settle")
            iqn = f"iqn.2026-11.io.fabric.lab:hd-{fs}-{uid}"
            params = {"name": f"hd_{fs}_{uid}", "dev": f"/dev/zvol/{vol}", "iqn": iqn, "portal": portal,
                      "initiator": initiator}
            if fs == "chap":
                params["chap"] = {"username": f"hd{uid}", "password": info["chap_password"]}
            made["iqns"].append(iqn)
            made["names"].append(params["name"])
            out = run_python(storage, EXPORT, json.dumps(params))
            assert out.rc == 0, out.stderr
            info[fs] = iqn
        yield info
    finally:
        step("cleanup: mount units, sessions, node records on gpu1; targets, backstores, pool on storage1")
        for fs in ("ext4", "xfs", "chap"):
            unit = gpu.run(f"systemd-escape --path --suffix=mount /datasets/hd-{fs}-{uid}").stdout.strip()
            gpu.run(f"systemctl disable --now '{unit}'; rm -f '/etc/systemd/system/{unit}'; "
                    f"rmdir /datasets/hd-{fs}-{uid}")
        gpu.run("systemctl daemon-reload")
        for iqn in made["iqns"]:
            gpu.run(f"iscsiadm -m node -T {iqn} -p {portal}:3260 --logout; iscsiadm -m node -T {iqn} -p {portal}:3260 "
                    "-o delete")
        for path, b64 in saved.items():
            gpu.run(f"echo {b64} | base64 -d > {path}")
        run_python(storage, UNEXPORT, json.dumps(made))
        storage.run(f"zpool destroy -f {pool}; rm -f {img}; rmdir /mnt/{pool}")
        if site_converged_here(lab):  # not a record an earlier lab of this checkout left
            step("gpu1: the site's GPU layer again (its mounts were purged by this file's role runs)")
            # the initiator role alone: this file's runs changed nothing of the agent's (fabric_node, tag agent)
            back = ansible_playbook(lab, "playbooks/gpu.yml", "--limit", "gpu1", "--tags", "initiator")
            assert back.rc == 0, back.output[-4000:]


def playbook(tmp_path: Path, lab, extra: dict, *args: str) -> subprocess.CompletedProcess:
    book = tmp_path / "site.yml"
    book.write_text(yaml.safe_dump(PLAYBOOK))
    varfile = tmp_path / "vars.yml"
    varfile.write_text(yaml.safe_dump(extra))
    proc = run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(lab.inventory), str(book),
                           "-e", f"@{varfile}", *args], cwd=REPO, capture_output=True, text=True)
    return proc


def role_vars(info: dict, *names: str, password: str | None = None) -> dict:
    exports = []
    for fs in names:
        export = {"name": f"hd-{fs}-{info['uid']}", "portal": info["portal"], "target_iqn": info[fs],
                  "fstype": "xfs" if fs == "xfs" else "ext4"}
        if fs == "chap":
            export["chap"] = {"username": f"hd{info['uid']}", "password": password or info["chap_password"]}
        exports.append(export)
    # the lab inventory gives GPU nodes default CHAP credentials (for storage1's own exports);
    # this test's targets carry their own settings, so the defaults are cleared here
    no_default_chap = {f"iscsi_initiator_chap_{k}": "" for k in ("username", "password", "username_in", "password_in")}
    no_default_chap["iscsi_initiator_chap_per_host"] = False  # these raw exports carry CHAP only where given
    return {"iscsi_initiator_iqn": info["initiator"], "iscsi_initiator_exports": exports, **no_default_chap}


def test_role_mounts_readonly_exports_idempotently_and_removes_unlisted_ones(hosts, lab, exports, tmp_path):
    gpu, uid = hosts["gpu1"], exports["uid"]
    variables = role_vars(exports, "ext4", "xfs", "chap")

    step("gpu1: first run of the role (log in, mount read-only)")
    first = playbook(tmp_path, lab, variables)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr
    assert recap(first.stdout)["changed"] > 0
    assert exports["chap_password"] not in first.stdout + first.stderr

    step("gpu1: second run changes nothing")
    second = playbook(tmp_path, lab, variables)
    assert second.returncode == 0, second.stdout[-4000:]
    assert recap(second.stdout)["changed"] == 0, second.stdout[-4000:]

    step("gpu1: sessions, read-only mounts, content, enabled units")
    sessions = gpu.check_output("iscsiadm -m session")
    for fs in ("ext4", "xfs", "chap"):
        assert exports[fs] in sessions
        mountpoint = f"/datasets/hd-{fs}-{uid}"
        found = json.loads(gpu.check_output(f"findmnt -J -o TARGET,SOURCE,FSTYPE,OPTIONS --mountpoint {mountpoint}"))
        fsinfo = found["filesystems"][0]
        assert "ro" in fsinfo["options"].split(","), fsinfo
        assert fsinfo["fstype"] == ("xfs" if fs == "xfs" else "ext4")
        assert gpu.check_output(f"cat {mountpoint}/hello.txt") == f"content-{fs}-{uid}"
        write = gpu.run(f"echo x > {mountpoint}/new.txt")
        assert write.rc != 0 and "Read-only file system" in write.stderr, write.stderr
        unit = gpu.check_output(f"systemd-escape --path --suffix=mount {mountpoint}")
        assert gpu.check_output(f"systemctl is-enabled '{unit}'") == "enabled"
        record = gpu.check_output(f"iscsiadm -m node -T {exports[fs]} -p {exports['portal']}:3260")
        assert "node.startup = automatic" in record
        disk = gpu.check_output(f"basename $(readlink -f {fsinfo['source']})")
        # the udev rule lifts LIO's optimal transfer length (the zvol's volblocksize) as the request cap
        assert gpu.check_output(f"cat /sys/block/{disk}/queue/max_sectors_kb") == "1024", disk
        assert gpu.check_output(f"cat /sys/block/{disk}/queue/read_ahead_kb") == "4096", disk  # issue 14
        assert "[none]" in gpu.check_output(f"cat /sys/block/{disk}/queue/scheduler"), disk  # issue 14

    step("gpu1: --check --diff with the default initiator name (BASE:inventory name) shows it and changes nothing")
    default = dict(variables)
    del default["iscsi_initiator_iqn"]  # the default rule, with a base no node uses (whatever gpu1 has now)
    default["fabric_iqn_base"] = "iqn.2026-11.io.fabric.preview"  # the base (an extra variable: this play only)
    preview = playbook(tmp_path, lab, default, "--check", "--diff")
    assert preview.returncode == 0, preview.stdout[-4000:]
    assert "+InitiatorName=iqn.2026-11.io.fabric.preview:gpu1" in preview.stdout, preview.stdout[-4000:]
    assert initiator_name(gpu) == exports["initiator"]

    # ---- exports taken off the list (the node is converged with ext4, xfs and chap)
    xfs_point = f"/datasets/hd-xfs-{uid}"
    hand = f"/etc/systemd/system/srv-hand{uid}.mount"  # a unit the role did not write: never touched
    gpu.run_expect([0], f"printf '[Mount]\\nWhat=/dev/null\\nWhere=/srv/hand{uid}\\nType=none\\n' > {hand}")
    try:
        step("gpu1: a process in the xfs mount; the role without xfs and chap is refused and changes nothing")
        gpu.run_expect([0], f"systemd-run --unit=hd-busy-{uid} --property=WorkingDirectory={xfs_point} sleep 600")
        busy = playbook(tmp_path, lab, role_vars(exports, "ext4"))
        assert busy.returncode != 0
        assert f"{xfs_point} by" in busy.stdout and "sleep" in busy.stdout, busy.stdout[-4000:]
        assert recap(busy.stdout)["changed"] == 0
        assert gpu.run(f"findmnt -n {xfs_point}").rc == 0 and exports["chap"] in gpu.check_output("iscsiadm -m session")

        step("gpu1: the process ends; the role without xfs and chap removes their mounts and sessions")
        gpu.run(f"systemctl stop hd-busy-{uid}")
        removed = playbook(tmp_path, lab, role_vars(exports, "ext4"), "--diff")
        assert removed.returncode == 0, removed.stdout[-4000:]
        assert recap(removed.stdout)["changed"] > 0
        sessions = gpu.check_output("iscsiadm -m session")
        assert exports["ext4"] in sessions
        assert exports["xfs"] not in sessions and exports["chap"] not in sessions
        for fs in ("xfs", "chap"):
            point = f"/datasets/hd-{fs}-{uid}"
            assert gpu.run(f"findmnt -n {point}").rc != 0, f"{point} is still mounted"
            unit = gpu.check_output(f"systemd-escape --path --suffix=mount {point}")
            assert not gpu.file(f"/etc/systemd/system/{unit}").exists
            records = gpu.run(f"iscsiadm -m node -T {exports[fs]}")
            assert records.rc != 0, f"node record of {exports[fs]} is still there: {records.stdout}"
        assert gpu.check_output(f"cat /datasets/hd-ext4-{uid}/hello.txt") == f"content-ext4-{uid}"
        assert gpu.file(hand).exists

        step("gpu1: a second run after the removal changes nothing")
        again = playbook(tmp_path, lab, role_vars(exports, "ext4"))
        assert again.returncode == 0 and recap(again.stdout)["changed"] == 0, again.stdout[-4000:]
    finally:
        gpu.run(f"systemctl stop hd-busy-{uid}; rm -f {hand}")


def test_wrong_chap_secret_fails_clearly(hosts, lab, exports, tmp_path):
    step("gpu1: the CHAP export with a wrong secret")
    wrong = f"wrong{exports['uid']}secret"
    run = playbook(tmp_path, lab, role_vars(exports, "chap", password=wrong))
    assert run.returncode != 0
    out = run.stdout + run.stderr
    assert "authorization failure" in out and "CHAP" in out and "ACL" in out, out[-4000:]
    assert wrong not in out
    assert exports["chap"] not in hosts["gpu1"].run("iscsiadm -m session").stdout


def test_invalid_iqn_fails_in_preflight_before_any_change(hosts, lab, exports, tmp_path):
    gpu = hosts["gpu1"]
    before = gpu.check_output("md5sum /etc/iscsi/initiatorname.iscsi /etc/iscsi/iscsid.conf")
    sessions = gpu.run("iscsiadm -m session").stdout
    variables = role_vars(exports, "ext4")
    variables["iscsi_initiator_iqn"] = "iqn.2026-11.lab:GPU1"
    run = playbook(tmp_path, lab, variables)
    assert run.returncode != 0
    assert "Preflight | initiator name is a valid IQN" in run.stdout
    assert "is not a valid iSCSI name" in run.stdout
    counts = recap(run.stdout)
    assert counts["changed"] == 0 and counts["failed"] == 1
    assert gpu.check_output("md5sum /etc/iscsi/initiatorname.iscsi /etc/iscsi/iscsid.conf") == before
    assert gpu.run("iscsiadm -m session").stdout == sessions  # no login, no logout
