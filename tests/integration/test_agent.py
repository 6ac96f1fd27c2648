"""Issue 29 on the lab: storage nodes grant, GPU nodes attach (the node agent fabric-node), and fabricctl's key
on the GPU nodes runs nothing but the agent's verbs.

The module converges the agent on the GPU nodes (playbooks/gpu.yml --tags agent) and the agent-only key
(`fabricctl_gpu_access: agent`, the lab's setting as the role's default; playbooks/fabricctl.yml), as the site
already has them: the whole suite runs this production path (checkpoints included, test_checkpoints.py). Each
test makes its own dataset version and leaves no grant, session, node record or mount behind. Bad input, faults
and attacks of the issue's list:

* attach a version not granted, not existing, malformed (`../x`, spaces, 300 characters): refused naming the
  grant to run, nothing changed on the node;
* two attaches of one version at once: one mount, two holders; the last one out detaches;
* detach while a process reads: refused; it goes through once the reader is gone (or the holder's job ended);
* the only storage node down at attach: refused cleanly (reason unreachable), nothing left; with a replica on
  storage2 granted too, the attach goes through storage2;
* the GPU node rebooted with a job's attachment: nothing logs in again by itself, the boot-time gc removes it;
* the agent SIGKILLed mid-attach: running it again converges;
* the storage node's key runs nothing but the agent's verbs; a non-root user cannot attach or detach; a crafted
  name never reaches a path outside /datasets;
* revoke refused while the host is logged in, --force cuts it off.
"""

from __future__ import annotations

import json
import shlex
import time

import pytest
from conftest import Fctl, ansible_playbook, step, wait_for

GPU = "gpu1"
AGENT = "/usr/local/sbin/fabric-node"
KEY = ("ssh -i /etc/fabricctl/id_ed25519 -o UserKnownHostsFile=/etc/fabricctl/known_hosts "
       "-o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=10")


@pytest.fixture(scope="module")
def agent_mode(lab, hosts, converged):
    """The agent on the GPU nodes and fabricctl's key there restricted to it (the lab's own settings: both runs
    converge what the site made)."""
    step("the node agent on the GPU nodes (gpu.yml --tags agent)")
    res = ansible_playbook(lab, "playbooks/gpu.yml", "--tags", "agent", gather_facts=False)
    assert res.rc == 0, res.output[-6000:]
    step("fabricctl's key on the GPU nodes runs only the agent (fabricctl_gpu_access: agent)")
    res = ansible_playbook(lab, "playbooks/fabricctl.yml", extra_vars={"fabricctl_gpu_access": "agent"})
    assert res.rc == 0, res.output[-6000:]
    return hosts


def agent(host, *args: str, user: str = ""):
    """`fabric-node ARGS --json` on a GPU node: (rc, the one JSON object it printed)."""
    prefix = f"sudo -u {user} " if user else ""
    res = host.run(prefix + "timeout 600 " + shlex.join([AGENT, *args, "--json"]))
    try:
        return res.rc, json.loads(res.stdout)
    except ValueError:
        return res.rc, {"stdout": res.stdout, "stderr": res.stderr}


def node_state(host) -> dict:
    """What an attach could change on a GPU node: sessions, node records, mounts under /datasets, records."""
    return {"sessions": host.run("iscsiadm -m session 2>/dev/null | sort").stdout,
            "records": host.run("iscsiadm -m node 2>/dev/null | sort").stdout,
            "mounts": host.run("findmnt -rn -o TARGET | grep '^/datasets/' | sort").stdout,
            "attachments": host.run("ls /var/lib/fabric-node/attachments 2>/dev/null | sort").stdout,
            "units": host.run("ls /etc/systemd/system/*.mount 2>/dev/null | sort").stdout}


@pytest.fixture
def version(agent_mode, uid):
    """A sealed version of its own (`ag<uid>@v1`), granted to nobody yet; revoked from all and destroyed after."""
    storage = agent_mode["storage1"]
    fctl = Fctl(storage)
    name = f"ag{uid}"
    fctl.json("dataset", "create", name, "--size", "64M")
    storage.check_output(f"rm -rf /srv/{name} && mkdir -p /srv/{name} && head -c 1M /dev/urandom > /srv/{name}/f")
    fctl.json("dataset", "ingest", name, f"/srv/{name}/")
    fctl.json("dataset", "seal", name, "v1")
    yield f"{name}@v1"
    for gpu in ("gpu1", "gpu2"):
        agent(agent_mode[gpu], "detach", "--holder", "manual", "--all", "--force")
        for holder in agent(agent_mode[gpu], "list")[1].get("attachments", []):
            for h in holder["holders"]:
                agent(agent_mode[gpu], "detach", holder["ref"], "--holder", h["holder"], "--force")
    fctl("revoke", f"{name}@v1", "--from", "gpu_nodes", "--force")
    fctl("dataset", "destroy", name, "--force")
    storage.run(f"rm -rf /srv/{name}")


def test_attach_refuses_what_is_not_granted_missing_or_malformed_and_changes_nothing(agent_mode, version):
    gpu = agent_mode[GPU]
    fctl = Fctl(agent_mode["storage1"])
    fctl.json("grant", version, "--to", "gpu2")  # granted, but not to gpu1
    before = node_state(gpu)
    name = version.split("@")[0]
    for ref in (version, f"{name}@v9", "nope@v1"):
        rc, out = agent(gpu, "attach", ref, "--holder", "job:1")
        assert rc == 1 and out["reason"] == "not_granted", out
        assert f"fabricctl grant {ref} --to {GPU}" in out["fix"], out
    for ref in ("../x", "../x@v1", "a b@v1", "x" * 300, f"{name}@../../etc", "/etc@v1"):
        rc, out = agent(gpu, "attach", ref, "--holder", "job:1")
        assert rc == 1 and "invalid" in out["problem"] and out["fix"], (ref, out)
    assert node_state(gpu) == before
    assert gpu.run("find / -xdev -newer /var/lib/fabric-node -name 'x*' -path '*..*' 2>/dev/null").stdout == ""


def test_two_attaches_at_once_share_one_mount_and_the_last_one_out_detaches(agent_mode, version):
    gpu = agent_mode[GPU]
    Fctl(agent_mode["storage1"]).json("grant", version, "--to", GPU)
    before = node_state(gpu)
    both = gpu.run(f"({AGENT} attach {version} --holder job:11 --json > /run/a11.json & "
                   f"{AGENT} attach {version} --holder job:12 --json > /run/a12.json & wait) && "
                   "cat /run/a11.json /run/a12.json")
    assert both.rc == 0, both.stderr
    path = "/datasets/" + version.replace("@", "/")
    assert gpu.run(f"findmnt -rn -o TARGET {path} | wc -l").stdout.strip() == "1"
    assert "ro" in gpu.run(f"findmnt -rn -o OPTIONS {path}").stdout.split(",")
    listed = agent(gpu, "list")[1]
    (att,) = [a for a in listed["attachments"] if a["ref"] == version]
    assert [h["holder"] for h in att["holders"]] == ["job:11", "job:12"]
    record = f"/var/lib/fabric-node/attachments/{version}.json"  # read with python3: the image has no jq
    target = gpu.check_output(f"python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[\"target\"])' "
                              f"{record}")
    # never logs in again by itself
    assert gpu.run(f"iscsiadm -m node -T {target} | grep node.startup").stdout.split()[-1] == "manual"
    rc, out = agent(gpu, "detach", version, "--holder", "job:11")
    assert rc == 0 and not out["detached"] and out["holders"] == ["job:12"]
    assert gpu.run(f"findmnt {path}").rc == 0
    rc, out = agent(gpu, "detach", version, "--holder", "job:12")
    assert rc == 0 and out["detached"]
    assert node_state(gpu) == before


def test_detach_while_a_process_reads_is_refused_and_goes_through_once_it_is_gone(agent_mode, version):
    gpu = agent_mode[GPU]
    Fctl(agent_mode["storage1"]).json("grant", version, "--to", GPU)
    path = "/datasets/" + version.replace("@", "/")
    assert agent(gpu, "attach", version, "--holder", "job:21")[0] == 0
    gpu.run_expect([0], f"systemd-run --quiet --collect --unit=fabric-reader-21 -p WorkingDirectory={path} sleep 600")
    try:
        rc, out = agent(gpu, "detach", version, "--holder", "job:21")
        assert rc == 1 and "in use" in out["problem"] and "--force" in out["fix"], out
        assert gpu.run(f"findmnt {path}").rc == 0  # nothing changed
    finally:
        gpu.run("systemctl stop fabric-reader-21")
    rc, out = agent(gpu, "detach", version, "--holder", "job:21")
    assert rc == 0 and out["detached"] and gpu.run(f"findmnt {path}").rc != 0


def storage_address(gpu, node: str) -> str:
    config = json.loads(gpu.check_output("cat /etc/fabric-node/config.json"))
    return config["storage_nodes"][node]["portal"].rsplit(":", 1)[0]


def test_the_only_storage_node_down_fails_the_attach_cleanly(agent_mode, version):
    gpu = agent_mode[GPU]
    Fctl(agent_mode["storage1"]).json("grant", version, "--to", GPU)
    before = node_state(gpu)
    address = storage_address(gpu, "storage1")
    gpu.run_expect([0], f"ip route add blackhole {address}/32")
    try:
        rc, out = agent(gpu, "attach", version, "--holder", "job:31")
    finally:
        gpu.run(f"ip route del blackhole {address}/32")
    assert rc == 1 and out.get("reason") in ("unreachable", "not_granted"), out
    assert "storage1" in out["problem"]
    assert node_state(gpu) == before


def test_with_a_replica_on_storage2_the_attach_goes_through_storage2(agent_mode, version, peers, lab):
    gpu = agent_mode[GPU]
    s1, s2 = peers
    # the agents learn of storage2 from the inventory, which names it only since it booted (the `storage2` fixture)
    res = ansible_playbook(lab, "playbooks/gpu.yml", "--tags", "agent", gather_facts=False)
    assert res.rc == 0, res.output[-6000:]
    Fctl(s1).json("replicate", version, "--to", "storage2")
    Fctl(s1).json("grant", version, "--to", GPU)  # every storage node holding it grants it (storage2 too)
    address = storage_address(gpu, "storage1")
    gpu.run_expect([0], f"ip route add blackhole {address}/32")
    try:
        rc, out = agent(gpu, "attach", version, "--holder", "job:32")
    finally:
        gpu.run(f"ip route del blackhole {address}/32")
    assert rc == 0 and out["storage_nodes"] == ["storage2"], out
    assert agent(gpu, "detach", version, "--holder", "job:32")[0] == 0
    Fctl(s2)("revoke", version, "--from", GPU, "--force")
    s2.run(f"zfs destroy -r tank/datasets/{version.split('@')[0]}")


def test_the_agent_killed_mid_attach_converges_when_run_again(agent_mode, version):
    gpu = agent_mode[GPU]
    Fctl(agent_mode["storage1"]).json("grant", version, "--to", GPU)
    target_part = "ds." + version.replace("@", ".")
    gpu.run(f"{AGENT} attach {version} --holder job:41 > /dev/null 2>&1 & echo $! > /run/attach41.pid")
    assert wait_for(gpu, f"iscsiadm -m node | grep -q {target_part}", 120, 0.1)  # the node record is there
    gpu.run("kill -9 $(cat /run/attach41.pid)")
    rc, out = agent(gpu, "attach", version, "--holder", "job:41")
    assert rc == 0 and out["holders"] == ["job:41"], out
    path = "/datasets/" + version.replace("@", "/")
    assert gpu.run(f"findmnt -rn -o TARGET {path} | wc -l").stdout.strip() == "1"
    assert agent(gpu, "detach", version, "--holder", "job:41")[0] == 0


def test_a_reboot_with_a_jobs_attachment_logs_in_to_nothing_and_gc_cleans_up(agent_mode, version):
    from test_reboot import reboot  # noqa: PLC0415 - the lab's reboot and wait

    gpu = agent_mode[GPU]
    Fctl(agent_mode["storage1"]).json("grant", version, "--to", GPU)
    assert agent(gpu, "attach", version, "--holder", "job:51")[0] == 0
    target_part = "ds." + version.replace("@", ".")
    reboot(GPU)
    # before the unit has run in this boot it is inactive with Result=success too: wait for its exit
    assert wait_for(gpu, "test \"$(systemctl show -p ExecMainExitTimestampMonotonic --value fabric-node-gc.service)\" "
                         "-gt 0 && systemctl show -p Result --value fabric-node-gc.service | grep -qx success", 300, 3)
    assert target_part not in gpu.run("iscsiadm -m session 2>/dev/null").stdout  # nothing logged in by itself
    assert target_part not in gpu.run("iscsiadm -m node 2>/dev/null").stdout
    assert agent(gpu, "list")[1]["attachments"] == []
    assert gpu.run("findmnt /datasets/" + version.replace("@", "/")).rc != 0


def test_the_storage_nodes_key_runs_nothing_but_the_agents_verbs(agent_mode, lab, version):
    storage, gpu = agent_mode["storage1"], agent_mode[GPU]
    ssh = f"{KEY} root@{lab.addr(GPU)}"
    marker = "/root/pwned-by-key"
    for request in ("id", f"touch {marker}", f"sh -c 'touch {marker}'", f"list; touch {marker}",
                    f"list $(touch {marker})", f"attach {version} --holder job:1", "detach --holder job:1 --all",
                    "gc", f"attach {version} --holder manual --config /tmp/x", "attach ../../etc@v1 --holder manual",
                    # the checkpoint verbs: job names and steps by their rules, the key's own storage node only
                    "attach-writable ../../etc --fs ext4", "attach-writable x --fs ext4 --from storage2",
                    "attach-restore x ../1 --fs ext4", "freeze x --seconds 1", f"freeze x --seconds 30; touch {marker}",
                    "thaw /etc --seconds 30", "writer-state ../x", "refresh-credentials --password x",
                    "detach-writable x --holder manual"):
        res = storage.run(f"{ssh} {shlex.quote(request)}")
        assert res.rc != 0 and "refused" in res.stderr + res.stdout, (request, res.stdout, res.stderr)
    assert gpu.run(f"test -e {marker}").rc != 0
    res = storage.run(f"{ssh} 'list --json'")
    assert res.rc == 0 and "attachments" in json.loads(res.stdout)
    assert storage.run(f"{ssh} -N -L 9999:127.0.0.1:22 -o ExitOnForwardFailure=yes & sleep 3; "
                       "kill %1 2>/dev/null; ss -tln | grep -c ':9999 '").stdout.strip() == "0"


def test_a_non_root_user_can_neither_attach_nor_detach(agent_mode, version):
    gpu = agent_mode[GPU]
    Fctl(agent_mode["storage1"]).json("grant", version, "--to", GPU)
    before = node_state(gpu)
    for args in (["attach", version, "--holder", "job:61"], ["detach", "--holder", "manual", "--all"], ["gc"]):
        rc, out = agent(gpu, *args, user="nobody")
        assert rc != 0, (args, out)
    assert node_state(gpu) == before
    assert gpu.run("sudo -u nobody cat /etc/fabric-node/credentials.json").rc != 0


def test_publish_and_unpublish_go_through_the_agent_and_revoke_refuses_a_live_session(agent_mode, version):
    storage, gpu = agent_mode["storage1"], agent_mode[GPU]
    fctl = Fctl(storage)
    out = fctl.json("publish", version, "--to", GPU)
    assert out["hosts"][GPU]["result"]["holders"] == ["manual"], out
    res = fctl("revoke", version, "--from", GPU)
    assert res.rc == 1 and "logged in" in res.stderr
    assert agent(gpu, "attach", version, "--holder", "job:71")[0] == 0
    res = fctl("unpublish", version, "--from", GPU)
    assert res.rc == 1 and "held by job:71" in res.stderr  # a job still reads it
    assert agent(gpu, "detach", version, "--holder", "job:71")[0] == 0
    assert fctl("unpublish", version, "--from", GPU).rc == 0
    assert gpu.run("findmnt /datasets/" + version.replace("@", "/")).rc != 0
    fctl.json("grant", version, "--to", GPU)
    assert agent(gpu, "attach", version, "--holder", "job:72")[0] == 0
    out = fctl.json("revoke", version, "--from", GPU, "--force")
    assert out["nodes"]["storage1"]["revoked"] == [GPU], out
    time.sleep(1)
    assert agent(gpu, "detach", version, "--holder", "job:72", "--force")[0] == 0
