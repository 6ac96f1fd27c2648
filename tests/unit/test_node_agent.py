"""fabric_core.node.agent and the fabric-node CLI on a simulated GPU node (node_fake.FakeNode): attach, holders
counted, detach, gc, refusals, the configuration files; every secret kept off command lines and output."""

from __future__ import annotations

import json
import os

import pytest
from fabric_core.base.errors import Busy, UserError
from fabric_core.base.rules import OPEN_ISCSI, parse_chap
from fabric_core.node import agent as agent_mod
from fabric_core.node import attachments as at
from fabric_core.node import config as node_config
from node_fake import FakeNode
from support import FCTL_IQN_BASE, GPU1

from fabric_node import main as cli

BASE = FCTL_IQN_BASE
P1, P2 = "10.77.0.11:3260", "10.77.0.12:3260"
V3 = f"{BASE}:ds.imagenet.v3"
SECRETS = ("gpu1-s3cret-1", "gpu1-mutual-1")
CHAP = {"username": "gpu1", "password": SECRETS[0], "username_in": "fabric-target", "password_in": SECRETS[1]}
RAW = {"host": "gpu1", "initiator": GPU1, "iqn_base": BASE, "mount_root": "/datasets",
       "storage_nodes": {"storage1": {"portal": P1}, "storage2": {"portal": P2}}, "multipath": True}


def config(tmp_path, **extra) -> node_config.NodeConfig:
    return node_config.parse({**RAW, "state_dir": str(tmp_path / "state"), **extra}, {"chap": CHAP})


def agent(tmp_path, node: FakeNode, boot: str = "boot-1", sleep=lambda s: None, **extra) -> agent_mod.Agent:
    return agent_mod.Agent(config(tmp_path, **extra), node, boot_id=boot, lock_path=str(tmp_path / "node.lock"),
                           sleep=sleep)


def granted(*portals, down=()) -> FakeNode:
    return FakeNode(GPU1, grants={p: {V3} for p in portals}, down=down)


# --- attach ---------------------------------------------------------------------------------------

def test_a_job_attaches_a_granted_version_read_only_until_reboot(tmp_path):
    node = granted(P1)
    out = agent(tmp_path, node).attach("imagenet@v3", "job:42")
    assert out["path"] == "/datasets/imagenet/v3" and out["holders"] == ["job:42"]
    assert out["storage_nodes"] == ["storage1"] and out["device"].startswith(f"/dev/disk/by-path/ip-{P1}-iscsi-")
    assert node.mounts["/datasets/imagenet/v3"][2].startswith("ro,noload")  # ext4: no journal replay
    assert "/datasets/imagenet/v3" in node.transient and not any(p.startswith("/etc/systemd") for p in node.files)
    assert node.records[(V3, P1)]["node.startup"] == "manual"  # never logs in again by itself at boot
    assert (V3, P2) not in node.records  # storage2 refused it: its record is gone
    record = at.Store(str(tmp_path / "state")).load("imagenet@v3")
    assert record.state == "attached" and list(record.holders) == ["job:42"]
    assert not any(s in json.dumps(node.seen) + json.dumps(out) for s in SECRETS)  # secrets only on stdin
    assert node.records[(V3, P1)]["node.session.auth.password"] == SECRETS[0]


def test_two_jobs_share_one_mount_and_the_last_one_out_detaches(tmp_path):
    node = granted(P1)
    ag = agent(tmp_path, node)
    ag.attach("imagenet@v3", "job:1")
    logins = sum(1 for a in node.seen if a[-1] == "--login")
    out = ag.attach("imagenet@v3", "job:2")
    assert out["holders"] == ["job:1", "job:2"] and sum(1 for a in node.seen if a[-1] == "--login") == logins
    first = ag.detach("imagenet@v3", "job:1")
    assert first["held"] and not first["detached"] and first["holders"] == ["job:2"]
    assert "/datasets/imagenet/v3" in node.mounts
    last = ag.detach("imagenet@v3", "job:2")
    assert last["detached"] and not node.mounts and not node.sessions and not node.records
    assert at.Store(str(tmp_path / "state")).refs() == []
    again = ag.detach("imagenet@v3", "job:2")  # an epilog that runs twice
    assert not again["held"] and not again["changed"]


def test_a_jobs_attachment_from_the_only_storage_node_reads_the_disk_without_a_map(tmp_path):
    """A map of one path buys a job nothing (no other node can join it before the configuration changes): its
    attachment does not even ask whether multipathd runs; a manual holder's, or one with several storage nodes,
    does (a map, when multipathd runs: another node's path joins it later)."""
    asked = ["systemctl", "is-active", "multipathd.service"]
    one = {"storage_nodes": {"storage1": {"portal": P1}}}
    node = granted(P1)
    out = agent(tmp_path, node, **one).attach("imagenet@v3", "job:1")
    assert asked not in node.seen and out["multipath"] is None and out["device"].startswith("/dev/disk/by-path/")
    manual = granted(P1)
    agent(tmp_path / "m", manual, **one).attach("imagenet@v3", "manual")
    assert asked in manual.seen
    several = granted(P1)
    agent(tmp_path / "s", several).attach("imagenet@v3", "job:1")
    assert asked in several.seen


def test_a_jobs_plain_disk_is_mounted_as_the_kernel_named_it_before_udev_and_a_manual_one_through_udevs_link(tmp_path):
    """A job's attachment of a plain disk waits for the kernel's disk of its session (sysfs), not for udev's rules
    and link, and mounts it with mount(8), no unit; a manual holder's mount unit names udev's by-path link, so that
    attach waits for udev."""
    node = granted(P1)
    out = agent(tmp_path, node).attach("imagenet@v3", "job:1")
    kernel = "/dev/" + node.sessions[(V3, P1)]
    assert node.mounts["/datasets/imagenet/v3"][0] == kernel and out["device"].startswith("/dev/disk/by-path/")
    assert any(a[:2] == ["bash", "-c"] and a[3] == "fabric-disk" and a[4:7] == [V3, *P1.split(":")] for a in node.seen)
    assert not any(a[:1] == ["udevadm"] or a[:1] == ["systemd-mount"] for a in node.seen)
    assert any(a[:2] == ["mount", "--mkdir"] and a[-2:] == [kernel, "/datasets/imagenet/v3"] for a in node.seen)
    manual = granted(P1)
    agent(tmp_path / "m", manual).attach("imagenet@v3", "manual")
    assert any(a[:2] == ["udevadm", "wait"] for a in manual.seen)
    assert not any(a[:2] == ["bash", "-c"] or a[:1] == ["mount"] for a in manual.seen)
    unit = manual.files["/etc/systemd/system/datasets-imagenet-v3.mount"]
    assert f"What=/dev/disk/by-path/ip-{P1}-iscsi-{V3}-lun-0" in unit


def test_several_storage_nodes_without_multipathd_attach_from_one(tmp_path):
    node = granted(P1, P2)
    out = agent(tmp_path, node).attach("imagenet@v3", "job:1")
    assert out["storage_nodes"] == ["storage1"] and list(node.sessions) == [(V3, P1)]


def test_the_only_storage_node_down_fails_cleanly_and_a_replica_is_read_instead(tmp_path):
    down = FakeNode(GPU1, grants={P1: {V3}}, down=(P1,))
    with pytest.raises(agent_mod.StorageUnreachable) as err:
        agent(tmp_path, down).attach("imagenet@v3", "job:1")
    assert "storage1 cannot be reached" in err.value.problem and err.value.exit_code == 1
    assert not down.records and not down.mounts and at.Store(str(tmp_path / "state")).refs() == []
    replica = FakeNode(GPU1, grants={P1: {V3}, P2: {V3}}, down=(P1,))
    assert agent(tmp_path, replica).attach("imagenet@v3", "job:1")["storage_nodes"] == ["storage2"]


def test_a_version_not_granted_is_refused_naming_the_grant_and_changes_nothing(tmp_path):
    node = FakeNode(GPU1, grants={P1: {f"{BASE}:ds.other.v1"}})
    with pytest.raises(agent_mod.NotGranted) as err:
        agent(tmp_path, node).attach("imagenet@v3", "job:1")
    assert "not granted to this host (gpu1" in err.value.problem
    assert err.value.fix.startswith("on a storage node that holds it: `fabricctl grant imagenet@v3 --to gpu1`")
    assert not node.records and not node.sessions and not node.mounts
    assert at.Store(str(tmp_path / "state")).refs() == []


@pytest.mark.parametrize("rc", [5, 8])
def test_a_target_the_storage_node_does_not_have_is_not_granted_not_unreachable(tmp_path, rc):
    # LIO answers a login to a target it does not have with "target error (03/01)"; open-iscsi retries until it
    # gives up with 5 or 8 (seen on the lab): the portal took a TCP connection, so the node is up
    node = FakeNode(GPU1, grants={P1: {f"{BASE}:ds.other.v1"}}, unknown_rc=rc)
    with pytest.raises(agent_mod.NotGranted) as err:
        agent(tmp_path, node).attach("imagenet@v3", "job:1")
    assert "not granted to this host (gpu1" in err.value.problem
    assert ["timeout", "3", "bash", "-c", 'exec 3<>"/dev/tcp/$0/$1"', *P1.split(":")] in node.seen
    assert not node.records and not node.sessions and not node.mounts


def test_a_refusal_costs_one_attempt_and_one_retry_and_a_silent_portal_no_login(tmp_path):
    """open-iscsi's own retries of LIO's "target error (03/01)" cost a job 31.6 s per storage node without the version
    (measured on the lab); the agent makes one attempt per login, retries a refusal once after LOGIN_PAUSE, and does
    not log in where the portal takes no TCP connection."""
    node = FakeNode(GPU1, grants={P2: {V3}}, down=(P1,), unknown_rc=5)
    slept = []
    agent(tmp_path, node, sleep=slept.append).attach("imagenet@v3", "job:1")
    logins = [argv for argv in node.seen if argv[-1] == "--login"]
    assert [argv[argv.index("-p") + 1] for argv in logins] == [P2]  # storage1 (down) never tried
    assert node.records[(V3, P2)]["node.session.initial_login_retry_max"] == "0"
    assert slept == []
    lacking = FakeNode(GPU1, grants={P1: set(), P2: {V3}}, unknown_rc=5)
    agent(tmp_path / "b", lacking, sleep=slept.append).attach("imagenet@v3", "job:1")
    tries = [argv[argv.index("-p") + 1] for argv in lacking.seen if argv[-1] == "--login"]
    assert tries == [P1, P1, P2] and slept == [agent_mod.LOGIN_PAUSE]
    assert (V3, P1) not in lacking.records  # the refused login's record is gone


def test_a_tag_is_not_resolved_by_the_agent_and_the_message_says_so(tmp_path):
    with pytest.raises(agent_mod.NotGranted) as err:
        agent(tmp_path, FakeNode(GPU1)).attach("imagenet@prod", "job:1")
    assert "agent cannot resolve tags" in err.value.fix and "fabricctl show imagenet@prod" in err.value.fix


def test_a_manual_holder_keeps_the_version_across_reboots_and_its_leaving_makes_it_runtime_again(tmp_path):
    node = granted(P1)
    ag = agent(tmp_path, node)
    ag.attach("imagenet@v3", "job:1")
    ag.attach("imagenet@v3", "manual")  # an operator's publish while a job reads it
    unit = "/etc/systemd/system/datasets-imagenet-v3.mount"
    assert "# fabric-owner: fabric-node" in node.files[unit]
    assert node.files["/etc/systemd/system/remote-fs.target.wants/datasets-imagenet-v3.mount"] == unit
    assert node.records[(V3, P1)]["node.startup"] == "automatic"
    assert f"What=/dev/disk/by-path/ip-{P1}-iscsi-{V3}-lun-0" in node.files[unit]  # udev's name, not the job's sdX
    ag.detach("imagenet@v3", "manual")
    assert unit not in node.files and node.records[(V3, P1)]["node.startup"] == "manual"
    assert "/datasets/imagenet/v3" in node.mounts  # the job still reads it


def test_a_killed_attach_is_finished_by_running_it_again(tmp_path):
    node = granted(P1)
    store = at.Store(str(tmp_path / "state"))
    half = at.Attachment("imagenet", "v3", V3, "/datasets/imagenet/v3")
    at.add_holder(half, "job:1", since="t", boot_id="boot-1")
    store.save(half)  # what an agent SIGKILLed after counting its holder leaves
    node.records[(V3, P1)] = {"node.startup": "manual"}  # ... and after making the node record
    out = agent(tmp_path, node).attach("imagenet@v3", "job:1")
    assert out["state"] == "attached" and "/datasets/imagenet/v3" in node.mounts and out["holders"] == ["job:1"]


def test_detach_while_a_process_reads_is_refused_unless_the_job_has_ended(tmp_path):
    node = granted(P1)
    ag = agent(tmp_path, node)
    ag.attach("imagenet@v3", "job:1")
    node.busy["/datasets/imagenet/v3"] = ["4242 python3"]
    with pytest.raises(Busy, match="in use by 4242 python3"):
        ag.detach("imagenet@v3", "job:1", is_alive=lambda job: True)
    assert "/datasets/imagenet/v3" in node.mounts and node.sessions  # nothing changed
    out = ag.detach("imagenet@v3", "job:1", is_alive=lambda job: False)  # the job has ended: lazily
    assert out["detached"] and out["users"] == ["4242 python3"] and not node.sessions


def test_detach_all_releases_everything_a_holder_holds(tmp_path):
    v1 = f"{BASE}:ds.llama.v1"
    node = FakeNode(GPU1, grants={P1: {V3, v1}})
    ag = agent(tmp_path, node)
    ag.attach("imagenet@v3", "job:7")
    ag.attach("llama@v1", "job:7")
    ag.attach("llama@v1", "job:8")
    out = ag.detach_all("job:7")
    assert out["detached"] == ["imagenet@v3"] and out["released"] == ["llama@v1"] and not out["failed"]
    assert list(node.mounts) == ["/datasets/llama/v1"]


# --- gc -------------------------------------------------------------------------------------------

def test_gc_after_a_reboot_cleans_up_and_nothing_logs_in_again(tmp_path):
    node = granted(P1)
    agent(tmp_path, node, boot="boot-1").attach("imagenet@v3", "job:1")
    # the reboot: sessions and runtime mounts are gone, node records and the agent's record stay
    node.sessions.clear()
    node.mounts.clear()
    node.transient.clear()
    out = agent(tmp_path, node, boot="boot-2").gc()
    assert [s["op"] for s in out["steps"]] == ["drop_holder", "detach"] and not out["failed"]
    assert not node.records and at.Store(str(tmp_path / "state")).refs() == []
    assert not any(a[-1] == "--login" for a in node.seen[-20:])


def test_gc_removes_a_session_and_mount_no_record_names(tmp_path):
    node = granted(P1)
    orphan = f"{BASE}:ds.orphan.v1"
    node.records[(orphan, P1)] = {"node.startup": "manual"}
    node.sessions[(orphan, P1)] = "sdz"
    node.mounts["/datasets/orphan/v1"] = ("/dev/sdz", "ext4", "ro,noload")
    node.mounts["/datasets/welcome"] = ("/dev/sdy", "ext4", "ro")  # the iscsi_initiator role's: not the agent's
    plan = agent_mod.Agent(config(tmp_path), FakeNode(GPU1), boot_id="b")  # an empty node plans nothing
    assert plan.gc()["steps"] == []
    out = agent(tmp_path, node).gc()
    assert out["done"] == ["unmount /datasets/orphan/v1 (no attachment record names it)",
                           f"log out of {orphan} at {P1} (no attachment holds it)",
                           f"delete the node record of {orphan} at {P1} (no attachment holds it)"]
    assert list(node.mounts) == ["/datasets/welcome"] and not node.sessions and not node.records


# --- current, in-use ------------------------------------------------------------------------------

def test_current_points_at_an_attached_version_only(tmp_path):
    node = granted(P1)
    ag = agent(tmp_path, node)
    with pytest.raises(UserError, match="not attached"):
        ag.current("imagenet", "v3")
    ag.attach("imagenet@v3", "manual")
    assert ag.current("imagenet", "v3")["switched"] and node.files["/datasets/imagenet/current"] == "v3"
    assert ag.current("imagenet", None)["switched"] and "/datasets/imagenet/current" not in node.files
    assert ag.in_use("imagenet@v3") == {"ref": "imagenet@v3", "path": "/datasets/imagenet/v3", "users": [],
                                        "holders": ["manual"]}


def test_an_attach_with_current_moves_the_link_once_mounted(tmp_path):
    node = granted(P1)
    out = agent(tmp_path, node).attach("imagenet@v3", "manual", current=True)
    assert out["current"] == "v3" and out["switched"] and node.files["/datasets/imagenet/current"] == "v3"
    again = agent(tmp_path, node).attach("imagenet@v3", "manual", current=True)  # nothing left to do
    assert not again["changed"] and not again["switched"] and again["current"] == "v3"
    plain = agent(tmp_path, node).attach("imagenet@v3", "job:7")  # without it the link is only read
    assert plain["current"] == "v3" and plain["switched"] is False


# --- the configuration ----------------------------------------------------------------------------

def test_the_configuration_is_checked_whole(tmp_path):
    cfg = config(tmp_path)
    assert [n.portal for n in cfg.storage_nodes] == [P1, P2] and cfg.chap == parse_chap(CHAP, OPEN_ISCSI)
    assert SECRETS[0] not in repr(cfg)
    for bad, match in (({"mount_root": "/etc"}, "system directory"), ({"storage_nodes": {}}, "storage_nodes"),
                       ({"initiator": "gpu1"}, "iSCSI name"), ({"colour": 1}, "colour"),
                       ({"job_alive_command": ["squeue"]}, "{job}"), ({"lock_wait_seconds": -1}, "lock_wait")):
        with pytest.raises(UserError, match=match):
            node_config.parse({**RAW, **bad}, {"chap": CHAP})
    with pytest.raises(UserError, match="no CHAP"):
        node_config.parse(RAW, {"chap": None})
    assert node_config.parse({**RAW, "insecure_no_chap": True}, {"chap": None}).chap is None
    with pytest.raises(UserError) as err:
        node_config.parse(RAW, {"chap": {**CHAP, "password": "a secret with spaces"}})
    assert "secret with" not in str(err.value)


def test_files_others_can_read_are_refused(tmp_path):
    conf, cred = tmp_path / "config.json", tmp_path / "credentials.json"
    conf.write_text(json.dumps(RAW))
    cred.write_text(json.dumps({"chap": CHAP}))
    os.chmod(conf, 0o644)
    os.chmod(cred, 0o644)
    with pytest.raises(UserError, match="readable or writable by others"):
        node_config.load(str(conf), str(cred))
    os.chmod(cred, 0o600)
    assert node_config.load(str(conf), str(cred)).host == "gpu1"
    cred.write_text("{broken " + SECRETS[0])
    with pytest.raises(UserError) as err:
        node_config.load(str(conf), str(cred))
    assert SECRETS[0] not in str(err.value)


# --- the command line -----------------------------------------------------------------------------

def test_the_cli_prints_one_json_object_for_a_result_and_for_a_failure(tmp_path, capsys):
    node = granted(P1)
    ag = agent(tmp_path, node)
    assert cli.main(["attach", "imagenet@v3", "--holder", "job:9", "--json"], agent=ag) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: out[k] for k in ("ref", "name", "version", "path", "holders", "storage_nodes")} == {
        "ref": "imagenet@v3", "name": "imagenet", "version": "v3", "path": "/datasets/imagenet/v3",
        "holders": ["job:9"], "storage_nodes": ["storage1"]} and out["device"]
    assert cli.main(["attach", "llama@v1", "--holder", "job:9", "--json"], agent=ag) == 1
    fail = json.loads(capsys.readouterr().out)
    assert fail["exit"] == 1 and fail["reason"] == "not_granted" and "fabricctl grant llama@v1 --to gpu1" in fail["fix"]
    assert cli.main(["attach", "../x@v1", "--holder", "job:9", "--json"], agent=ag) == 1
    assert "invalid" in json.loads(capsys.readouterr().out)["problem"]
    assert cli.main(["detach", "--holder", "job:9", "--all", "--json"], agent=ag) == 0
    assert json.loads(capsys.readouterr().out)["detached"] == ["imagenet@v3"]


def test_the_cli_refuses_a_non_root_user_before_reading_anything(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert cli.main(["attach", "imagenet@v3", "--holder", "job:1", "--json"]) == 1
    assert "runs as root" in json.loads(capsys.readouterr().out)["problem"]


def test_the_forced_command_refuses_anything_but_the_agents_verbs(tmp_path, capsys):
    node = granted(P1)
    ag = agent(tmp_path, node)
    assert cli.main(["--ssh"], agent=ag, environ={"SSH_ORIGINAL_COMMAND": "id"}) == 1
    assert "refused" in capsys.readouterr().err and node.seen == []
    assert cli.main(["--ssh"], agent=ag, environ={"SSH_ORIGINAL_COMMAND": "attach imagenet@v3 --holder job:1"}) == 1
    assert cli.main(["--ssh"], agent=ag,
                    environ={"SSH_ORIGINAL_COMMAND": "attach imagenet@v3 --holder manual --json"}) == 0
    assert json.loads(capsys.readouterr().out)["holders"] == ["manual"]
    assert cli.main(["--ssh", "list"], agent=ag, environ={}) == 1


# --- the agent's side of the layers -----------------------------------------------------------------------------

def test_the_gpu_node_side_imports_only_base_and_node_and_the_cli_only_them():
    """fabric_core.node (the agent's library: a CSI node plugin imports it too) reaches neither the storage side
    nor the services; fabric_node (the CLI) imports fabric_core.base and .node only, and never fabricctl."""
    import ast
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    node_dir = repo / "plugins" / "module_utils" / "fabric_core" / "node"
    for path in node_dir.glob("*.py"):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.ImportFrom) and n.level:
                target = "." * n.level + (n.module or "")
                assert target.startswith((".", "..base")) and not target.startswith(("..storage", "..services")), \
                    (path.name, target)
    for path in (repo / "fabric_node").glob("*.py"):
        for n in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                [n.module or ""] if isinstance(n, ast.ImportFrom) and not n.level else []
            for name in names:
                assert not name.startswith(("fabricctl", "fabric_core.storage", "fabric_core.services",
                                            "ansible")), (path.name, name)


def test_a_version_fabricctl_published_before_the_agent_is_adopted_without_a_remount(tmp_path):
    from fabric_core.node import mounts

    node = granted(P1)
    device = f"/dev/disk/by-path/ip-{P1}-iscsi-{V3}-lun-0"
    unit = f"/etc/systemd/system/{mounts.unit_name('/datasets/imagenet/v3')}"
    node.files[unit] = mounts.unit_text(device=device, mountpoint="/datasets/imagenet/v3", fstype="ext4",
                                        readonly=True, description="fabric dataset version imagenet@v3",
                                        device_unit=mounts.path_unit(device, "device"), owner="fabricctl")
    node.files["/etc/systemd/system/remote-fs.target.wants/datasets-imagenet-v3.mount"] = unit
    node.records[(V3, P1)] = {"node.startup": "automatic"}
    node.sessions[(V3, P1)] = "sdq"
    node.mounts["/datasets/imagenet/v3"] = (device, "ext4", "ro,noload")
    ag = agent(tmp_path, node)
    assert ag.gc()["steps"] == []  # fabricctl's own unit, no record: not the agent's to collect
    text = node.files[unit]
    out = ag.attach("imagenet@v3", "manual")
    assert out["holders"] == ["manual"] and node.files[unit] == text  # adopted as it is
    assert not any(a[:2] in (["systemctl", "restart"], ["systemctl", "stop"]) for a in node.seen)
    assert ag.detach("imagenet@v3", "manual")["detached"] and unit not in node.files and not node.sessions


def test_a_storage_node_asking_for_a_version_read_around_it_makes_the_attach_converge_again(tmp_path):
    """The lab's test_reboot: shared@v1 attached through storage1 alone, then replicated to storage2 and published
    from there; gpu1's agent found the attachment settled and never logged in to storage2. A request bound to a
    storage node (the key adds --from NODE to attach) that the multipath map has no path through converges again."""
    node = granted(P1, P2)
    ag = agent(tmp_path, node)
    att = at.Attachment("imagenet", "v3", V3, "/datasets/imagenet/v3", state="attached", persistent=True,
                        portals={"storage1": P1}, multipath="3600140")
    att.holders = {"manual": {"since": "t", "boot_id": "boot-1"}}
    node.mounts["/datasets/imagenet/v3"] = ("/dev/mapper/3600140", "ext4", "ro")
    assert ag._settled(att) and ag._settled(att, "storage1")
    assert not ag._settled(att, "storage2")  # no path through the node that asks
    assert ag._settled(att, "storage9")  # not a node of this configuration: nothing to log in to
    assert ag._settled(at.Attachment("imagenet", "v3", V3, "/datasets/imagenet/v3", state="attached",
                                     portals={"storage1": P1}), "storage2")  # one path (no multipathd): as it is


def test_the_storage_nodes_key_names_itself_on_an_attach_and_the_request_cannot():
    from fabric_node import ssh

    assert ssh.parse("attach imagenet@v3 --holder manual --json", "storage2") == [
        "attach", "imagenet@v3", "--holder", "manual", "--from", "storage2", "--json"]
    with pytest.raises(ssh.Refused):
        ssh.parse("attach imagenet@v3 --holder manual --from storage1", "storage2")
    assert ssh.parse("detach imagenet@v3 --holder manual --force", "storage2") == [
        "detach", "imagenet@v3", "--holder", "manual", "--from", "storage2", "--force"]


def test_an_unpublish_from_one_storage_node_takes_only_its_path_when_others_serve_the_version(tmp_path):
    """The lab's test_reboot: storage2's unpublish of shared@v1 took gpu1's mount, which storage1 still publishes.
    A detach of the manual holder through a storage node's key (--from NODE) with paths through other nodes logs
    out of that node alone; the mount, the map and the holder stay. The last node's unpublish detaches whole."""
    node = granted(P1, P2)
    node.sessions[(V3, P1)] = "sdb"
    node.sessions[(V3, P2)] = "sdc"
    node.records[(V3, P1)] = {"node.startup": "automatic"}
    node.records[(V3, P2)] = {"node.startup": "automatic"}
    node.mounts["/datasets/imagenet/v3"] = ("/dev/mapper/3600140", "ext4", "ro")
    ag = agent(tmp_path, node)
    att = at.Attachment("imagenet", "v3", V3, "/datasets/imagenet/v3", state="attached", persistent=True,
                        portals={"storage1": P1, "storage2": P2}, multipath="3600140",
                        holders={"manual": {"since": "t", "boot_id": "boot-1"}})
    ag.store.save(att)
    out = ag.detach("imagenet@v3", "manual", via="storage2")
    assert out["paths_left"] == 1 and out["holders"] == ["manual"] and not out["detached"]
    assert (V3, P2) not in node.sessions and (V3, P2) not in node.records
    assert (V3, P1) in node.sessions and "/datasets/imagenet/v3" in node.mounts
    assert ag.store.load("imagenet@v3").portals == {"storage1": P1}
    assert ag._settled(ag.store.load("imagenet@v3"), "storage1")
