"""Issue 30 on the lab: the CSI plugin (fabric-csi) driven through its real sockets on gpu1, with real iSCSI, LIO and
ZFS underneath, in the sequence the kubelet and the sidecars use. These machines run no Kubernetes (no kubelet, no
external-attacher): each test sends, with `fabric-csi call` on gpu1, the requests they send, in their order, each
one twice (CSI requires every call to be idempotent), and reads the outcome back through `iscsiadm`, `findmnt`
and LIO's configfs on storage1 (docs/csi.md, "What was tested, and how").

The module installs the node plugin on the GPU nodes as role fabric_node's service (`fabric_node_csi: true`,
playbooks/gpu.yml --tags agent) on the kubelet's socket path, and runs the controller on gpu1 as a cluster would
(`fabric-csi --mode controller --storage-node storage1`): with a key of its own that storage1 authorizes only for
`fabric-csi serve-grants`. At the end the key and the controller go and the node plugin is uninstalled again
(`fabric_node_csi: false`). Each test makes its own version and leaves no grant, session, node record or mount.

* the kubelet's sequence, two pods on one node: Probe, GetPluginInfo, NodeGetInfo, ControllerPublish, NodeStage,
  NodePublish x2, NodeGetVolumeStats, NodeUnpublish x2, NodeUnstage, ControllerUnpublish; each twice; the pods'
  paths refuse writes (a read-only bind of a read-only mount of a write-protected LUN);
* a writable access mode refused (INVALID_ARGUMENT), an unknown version NOT_FOUND, a version not granted
  FAILED_PRECONDITION, each changing nothing on gpu1 or in LIO;
* the plugin killed (-9) between stage and publish, restarted by systemd: publish and the rest continue;
* NodeUnstage while the storage node is gone: no session, no node record left, and `fabric-node gc` finds nothing;
* a reconnect (storage1 unreachable from gpu1 for 30 s under a staged, published volume: the connection fails and
  recovers): the next NodeStage and NodePublish leave exactly one mount at each path (no stacked mount);
* the socket is root's (a user on the node cannot call it) and the controller's key runs nothing but
  grant/revoke/show on storage1.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time

import pytest
from conftest import Fctl, ansible_playbook, step, wait_for

GPU = "gpu1"
PLUGIN = "/opt/fabric-node/bin/fabric-csi"  # role fabric_node's virtualenv
NODE_SOCK = "/var/lib/kubelet/plugins/csi.gpufabric.storage/csi.sock"  # fabric_node_csi_endpoint's default
CTRL_SOCK = "/run/fabric-csi-test/controller.sock"
CTRL_UNIT = "fabric-csi-controller-test"
KEY_DIR = "/etc/fabric-csi-test"
SERVE_GRANTS = "/opt/fabricctl/bin/fabric-csi serve-grants"  # role fabricctl's virtualenv on storage1
KUBELET = "/var/lib/kubelet"
READER = {"mount": {}, "access_mode": {"mode": "MULTI_NODE_READER_ONLY"}}
WRITER = {"mount": {}, "access_mode": {"mode": "SINGLE_NODE_WRITER"}}


def csi(host, sock: str, method: str, request: dict | None = None, *, user: str = ""):
    """One CSI call on ``host`` to the plugin at ``sock``: (rc, answer): the response, or {code, message}."""
    prefix = f"sudo -u {user} " if user else ""
    res = host.run(prefix + "timeout 600 " + shlex.join([PLUGIN, "call", method, json.dumps(request or {}),
                                                         "--endpoint", f"unix://{sock}", "--timeout", "590"]))
    try:
        return res.rc, json.loads(res.stdout)
    except ValueError:
        return res.rc, {"stdout": res.stdout, "stderr": res.stderr}


def ok(host, sock, method, request=None, times: int = 2) -> dict:
    """A call that must succeed, sent ``times`` times (the second proves it idempotent); the last answer."""
    answer = {}
    for _ in range(times):
        rc, answer = csi(host, sock, method, request)
        assert rc == 0, (method, request, answer)
    return answer


def refused(host, sock, method, request, code: str) -> dict:
    rc, answer = csi(host, sock, method, request)
    assert rc == 1 and answer.get("code") == code, (method, request, answer)
    return answer


def kubelet_paths(volume: str, *pods: str) -> tuple[str, list[str]]:
    """The staging path and the pods' target paths the kubelet would use for a volume (its layout)."""
    digest = hashlib.sha256(volume.encode()).hexdigest()
    staging = f"{KUBELET}/plugins/kubernetes.io/csi/csi.gpufabric.storage/{digest}/globalmount"
    pv = volume.replace("@", "-")
    return staging, [f"{KUBELET}/pods/{pod}/volumes/kubernetes.io~csi/{pv}/mount" for pod in pods]


def mounts_at(host, path: str) -> list[str]:
    """findmnt's lines for every mount stacked at ``path`` (VFS options)."""
    res = host.run(f"findmnt -rn -o TARGET,MAJ:MIN,VFS-OPTIONS --mountpoint {shlex.quote(path)}")
    return res.stdout.splitlines() if res.rc == 0 else []


def node_state(gpu) -> dict:
    return {"sessions": gpu.run("iscsiadm -m session 2>/dev/null | sort").stdout,
            "records": gpu.run("iscsiadm -m node 2>/dev/null | sort").stdout,
            "mounts": gpu.run("findmnt -rn -o TARGET | grep -e '^/datasets/' -e '^/var/lib/kubelet/' | sort").stdout,
            "attachments": gpu.run("ls /var/lib/fabric-node/attachments 2>/dev/null | sort").stdout}


def acls(storage, target: str) -> list[str]:
    """The initiators with an ACL on a target, read from LIO's configfs."""
    res = storage.run(f"ls /sys/kernel/config/target/iscsi/{target}/tpgt_1/acls 2>/dev/null")
    return res.stdout.split()


def storage_address(gpu) -> str:
    config = json.loads(gpu.check_output("cat /etc/fabric-node/config.json"))
    return config["storage_nodes"]["storage1"]["portal"].rsplit(":", 1)[0]


@pytest.fixture(scope="module")
def csi_lab(lab, hosts, converged):
    """The node plugin as a service on the GPU nodes, the controller on gpu1 with its restricted key on storage1."""
    storage, gpu = hosts["storage1"], hosts[GPU]
    # fabricctl's wheel, with fabric-csi serve-grants, is on storage1 already: the site's run (`converged`) installs
    # it there (checked below), so fabricctl.yml is not run again here
    step("the CSI node plugin on the GPU nodes (gpu.yml --tags agent, fabric_node_csi: true)")
    res = ansible_playbook(lab, "playbooks/gpu.yml", "--tags", "agent", extra_vars={"fabric_node_csi": True},
                           gather_facts=False)
    assert res.rc == 0, res.output[-6000:]
    assert wait_for(gpu, f"test -S {NODE_SOCK}", 120, 1)
    assert storage.run(f"test -x {SERVE_GRANTS.split()[0]}").rc == 0, "fabricctl's wheel has no fabric-csi"
    step("the controller's key, authorized on storage1 for serve-grants only, and the controller on gpu1")
    address = storage_address(gpu)
    gpu.run_expect([0], f"install -d -m 0700 {KEY_DIR} && rm -f {KEY_DIR}/id_ed25519* && "
                        f"ssh-keygen -q -t ed25519 -N '' -C fabric-csi-test -f {KEY_DIR}/id_ed25519 && "
                        f"ssh-keyscan -t ed25519 {address} > {KEY_DIR}/known_hosts 2>/dev/null")
    public = gpu.check_output(f"cat {KEY_DIR}/id_ed25519.pub").strip()
    line = f'restrict,command="{SERVE_GRANTS}" {public}'
    storage.run_expect([0], f"printf '%s\\n' {shlex.quote(line)} >> /root/.ssh/authorized_keys")
    gpu.run(f"systemctl stop {CTRL_UNIT} 2>/dev/null; systemctl reset-failed {CTRL_UNIT} 2>/dev/null")
    gpu.run_expect([0], f"systemd-run --unit={CTRL_UNIT} --property=Restart=on-failure {PLUGIN} --mode controller "
                        f"--endpoint unix://{CTRL_SOCK} --storage-node {address} --ssh-key {KEY_DIR}/id_ed25519 "
                        f"--known-hosts {KEY_DIR}/known_hosts")
    assert wait_for(gpu, f"test -S {CTRL_SOCK}", 120, 1)
    yield {"storage": storage, "gpu": gpu, "address": address, "key_line": line}
    step("the controller, its key and the node plugin go")
    gpu.run(f"systemctl stop {CTRL_UNIT}; rm -rf {KEY_DIR} {CTRL_SOCK}")
    gpu.run(f"findmnt -rn -o TARGET | grep -q '^{KUBELET}/' || rm -rf {KUBELET}")  # the kubelet's paths we made
    storage.run(f"grep -v -F -x {shlex.quote(line)} /root/.ssh/authorized_keys > /root/.ssh/ak.tmp; "
                "cat /root/.ssh/ak.tmp > /root/.ssh/authorized_keys; rm -f /root/.ssh/ak.tmp")
    res = ansible_playbook(lab, "playbooks/gpu.yml", "--tags", "agent", extra_vars={"fabric_node_csi": False},
                           gather_facts=False)
    assert res.rc == 0, res.output[-6000:]
    assert gpu.run("systemctl is-active fabric-csi.service").stdout.strip() != "active"


@pytest.fixture
def version(csi_lab, uid):
    """A sealed version of its own (`csi<uid>@v1`, a 1 MiB file), granted to nobody; all of it undone after."""
    storage, gpu = csi_lab["storage"], csi_lab["gpu"]
    fctl = Fctl(storage)
    name = f"csi{uid}"
    fctl.json("dataset", "create", name, "--size", "64M")
    storage.check_output(f"rm -rf /srv/{name} && mkdir -p /srv/{name} && head -c 1M /dev/urandom > /srv/{name}/f")
    fctl.json("dataset", "ingest", name, f"/srv/{name}/")
    fctl.json("dataset", "seal", name, "v1")
    ref = f"{name}@v1"
    yield ref
    staging, targets = kubelet_paths(ref, "pod-a", "pod-b", "pod-c")
    for path in targets:
        csi(gpu, NODE_SOCK, "NodeUnpublishVolume", {"volume_id": ref, "target_path": path})
    csi(gpu, NODE_SOCK, "NodeUnstageVolume", {"volume_id": ref, "staging_target_path": staging})
    gpu.run(f"/usr/local/sbin/fabric-node detach {ref} --holder csi:{ref} --force --json")
    fctl("revoke", ref, "--from", "gpu_nodes", "--force")
    fctl("dataset", "destroy", name, "--force")
    storage.run(f"rm -rf /srv/{name}")
    gpu.run(f"rm -rf {KUBELET}/pods/pod-a {KUBELET}/pods/pod-b {KUBELET}/pods/pod-c")


def stage_request(ref: str, staging: str, capability=READER) -> dict:
    return {"volume_id": ref, "staging_target_path": staging, "volume_capability": capability}


def publish_request(ref: str, staging: str, target: str, capability=READER) -> dict:
    return {**stage_request(ref, staging, capability), "target_path": target, "readonly": True}


def kubelet_prepares(gpu, staging: str, targets: list[str]) -> None:
    """What the kubelet makes before it calls: the staging directory and each target's parent."""
    parents = " ".join(shlex.quote(t.rsplit("/", 1)[0]) for t in targets)
    gpu.run_expect([0], f"mkdir -p {shlex.quote(staging)} {parents}")


# --- the kubelet's sequence ---------------------------------------------------------------------------------

def test_the_kubelets_sequence_for_two_pods_on_one_node_each_call_twice(csi_lab, version):
    storage, gpu = csi_lab["storage"], csi_lab["gpu"]
    fctl = Fctl(storage)
    staging, (pod_a, pod_b) = kubelet_paths(version, "pod-a", "pod-b")
    initiator = gpu.check_output("sed -n 's/^InitiatorName=//p' /etc/iscsi/initiatorname.iscsi").strip()
    step("identity: what node-driver-registrar, the attacher and the kubelet ask first")
    assert ok(gpu, NODE_SOCK, "Probe") == {"ready": True}
    assert ok(gpu, CTRL_SOCK, "Probe") == {"ready": True}
    assert ok(gpu, NODE_SOCK, "GetPluginInfo")["name"] == "csi.gpufabric.storage"
    assert ok(gpu, NODE_SOCK, "NodeGetInfo") == {"node_id": GPU}
    ctrl_caps = ok(gpu, CTRL_SOCK, "GetPluginCapabilities")["capabilities"]
    assert ctrl_caps == [{"service": {"type": "CONTROLLER_SERVICE"}}]
    types = {c["rpc"]["type"] for c in ok(gpu, CTRL_SOCK, "ControllerGetCapabilities")["capabilities"]}
    assert types == {"PUBLISH_UNPUBLISH_VOLUME", "PUBLISH_READONLY"}
    types = {c["rpc"]["type"] for c in ok(gpu, NODE_SOCK, "NodeGetCapabilities")["capabilities"]}
    assert types == {"STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS"}

    step("ControllerPublishVolume (external-attacher): the grant, read back in LIO's configfs")
    before = node_state(gpu)
    ok(gpu, CTRL_SOCK, "ControllerPublishVolume", {"volume_id": version, "node_id": GPU, "readonly": True,
                                                   "volume_capability": READER})
    target = fctl.json("show", version)["target"]
    assert initiator in acls(storage, target)
    assert node_state(gpu) == before  # a grant contacts no host
    assert GPU in fctl.json("show", version)["granted_to"]

    step("NodeStageVolume: one session, one read-only mount, one bind at the staging path")
    kubelet_prepares(gpu, staging, [pod_a, pod_b])
    ok(gpu, NODE_SOCK, "NodeStageVolume", stage_request(version, staging))
    sessions = [s for s in gpu.run("iscsiadm -m session").stdout.splitlines() if f" {target} " in s]
    assert len(sessions) == 1, sessions
    mountpoint = "/datasets/" + version.replace("@", "/")
    assert len(mounts_at(gpu, mountpoint)) == 1 and "ro" in mounts_at(gpu, mountpoint)[0].split()[2].split(",")
    assert len(mounts_at(gpu, staging)) == 1 and "ro" in mounts_at(gpu, staging)[0].split()[2].split(",")
    listed = json.loads(gpu.check_output("/usr/local/sbin/fabric-node list --json"))
    mine = [a for a in listed["attachments"] if a["ref"] == version]
    assert [h["holder"] for h in mine[0]["holders"]] == [f"csi:{version}"]

    step("NodePublishVolume for two pods: each its own read-only bind, writes refused, the data readable")
    for pod in (pod_a, pod_b):
        ok(gpu, NODE_SOCK, "NodePublishVolume", publish_request(version, staging, pod))
        layers = mounts_at(gpu, pod)
        assert len(layers) == 1 and "ro" in layers[0].split()[2].split(","), layers
        assert layers[0].split()[1] == mounts_at(gpu, mountpoint)[0].split()[1]  # the same file system
        res = gpu.run(f"touch {shlex.quote(pod)}/written-by-a-pod")
        assert res.rc != 0 and "Read-only file system" in res.stderr
    name = version.split("@")[0]
    want = storage.check_output(f"sha256sum /srv/{name}/f").split()[0]
    assert gpu.check_output(f"sha256sum {shlex.quote(pod_b)}/f").split()[0] == want
    assert len(sessions) == 1

    step("NodeGetVolumeStats (the kubelet's periodic call)")
    stats = ok(gpu, NODE_SOCK, "NodeGetVolumeStats", {"volume_id": version, "volume_path": pod_a,
                                                       "staging_target_path": staging})
    units = {u["unit"]: u for u in stats["usage"]}
    assert int(units["BYTES"]["total"]) > 0 and int(units["INODES"]["used"]) > 0

    step("NodeUnpublishVolume x2, NodeUnstageVolume: no bind, mount, session or node record left")
    for pod in (pod_a, pod_b):
        ok(gpu, NODE_SOCK, "NodeUnpublishVolume", {"volume_id": version, "target_path": pod})
        assert mounts_at(gpu, pod) == [] and gpu.run(f"test -e {shlex.quote(pod)}").rc != 0
    ok(gpu, NODE_SOCK, "NodeUnstageVolume", {"volume_id": version, "staging_target_path": staging})
    assert mounts_at(gpu, staging) == [] and mounts_at(gpu, mountpoint) == []
    assert target not in gpu.run("iscsiadm -m session 2>/dev/null").stdout
    assert target not in gpu.run("iscsiadm -m node 2>/dev/null").stdout
    gc = json.loads(gpu.check_output("/usr/local/sbin/fabric-node gc --dry-run --json"))
    assert gc["steps"] == [], gc

    step("ControllerUnpublishVolume: the grant is gone from configfs")
    ok(gpu, CTRL_SOCK, "ControllerUnpublishVolume", {"volume_id": version, "node_id": GPU})
    assert initiator not in acls(storage, target)


# --- refusals -------------------------------------------------------------------------------------------------

def test_writable_unknown_and_not_granted_are_refused_with_their_codes_and_change_nothing(csi_lab, version):
    storage, gpu = csi_lab["storage"], csi_lab["gpu"]
    staging, (pod_a,) = kubelet_paths(version, "pod-a")
    kubelet_prepares(gpu, staging, [pod_a])
    before = node_state(gpu)
    lio_before = storage.run("ls -R /sys/kernel/config/target/iscsi 2>/dev/null | md5sum").stdout
    answer = refused(gpu, CTRL_SOCK, "ControllerPublishVolume",
                     {"volume_id": version, "node_id": GPU, "volume_capability": WRITER}, "INVALID_ARGUMENT")
    assert "writable" in answer["message"]
    refused(gpu, NODE_SOCK, "NodeStageVolume", stage_request(version, staging, WRITER), "INVALID_ARGUMENT")
    refused(gpu, NODE_SOCK, "NodePublishVolume", publish_request(version, staging, pod_a, WRITER), "INVALID_ARGUMENT")
    name = version.split("@")[0]
    refused(gpu, CTRL_SOCK, "ControllerPublishVolume",
            {"volume_id": f"{name}@v9", "node_id": GPU, "volume_capability": READER}, "NOT_FOUND")
    refused(gpu, CTRL_SOCK, "ControllerPublishVolume",
            {"volume_id": version, "node_id": "gpu99", "volume_capability": READER}, "NOT_FOUND")
    answer = refused(gpu, NODE_SOCK, "NodeStageVolume", stage_request(version, staging), "FAILED_PRECONDITION")
    assert f"fabricctl grant {version} --to {GPU}" in answer["message"]  # staged before ControllerPublish
    for bad in ("../x@v1", "a b@v1", "x" * 300):
        refused(gpu, NODE_SOCK, "NodeStageVolume", stage_request(bad, staging), "INVALID_ARGUMENT")
    assert node_state(gpu) == before
    assert storage.run("ls -R /sys/kernel/config/target/iscsi 2>/dev/null | md5sum").stdout == lio_before


def test_the_socket_is_roots_and_the_controllers_key_runs_nothing_else(csi_lab, version):
    storage, gpu = csi_lab["storage"], csi_lab["gpu"]
    rc, answer = csi(gpu, NODE_SOCK, "Probe", user="nobody")
    assert rc == 1 and answer.get("code") == "UNAVAILABLE", answer  # the socket (0600) and its directory are root's
    ssh = (f"ssh -i {KEY_DIR}/id_ed25519 -o UserKnownHostsFile={KEY_DIR}/known_hosts -o StrictHostKeyChecking=yes "
           f"-o BatchMode=yes -o ConnectTimeout=10 root@{csi_lab['address']}")
    marker = "/root/pwned-by-csi-key"
    for request in ("id", f"touch {marker}", f"grant {version} --to {GPU} --json; touch {marker}",
                    f"grant {version} --to $(touch {marker}) --json", f"publish {version} --to {GPU} --json",
                    f"dataset destroy {version.split('@')[0]} --force --json", f"grant {version} --to gpu_nodes --json",
                    f"revoke {version} --from {GPU} --force --json"):
        res = gpu.run(f"{ssh} {shlex.quote(request)}")
        assert res.rc != 0 and json.loads(res.stdout)["error_type"] == "Refused", (request, res.stdout, res.stderr)
    assert storage.run(f"test -e {marker}").rc != 0
    res = gpu.run(f"{ssh} {shlex.quote(f'show {version} --json')}")
    assert res.rc == 0 and json.loads(res.stdout)["version"] == "v1"


# --- faults -----------------------------------------------------------------------------------------------------

def test_the_plugin_killed_between_stage_and_publish_continues_once_systemd_restarted_it(csi_lab, version):
    gpu = csi_lab["gpu"]
    staging, (pod_a,) = kubelet_paths(version, "pod-a")
    kubelet_prepares(gpu, staging, [pod_a])
    ok(gpu, CTRL_SOCK, "ControllerPublishVolume", {"volume_id": version, "node_id": GPU, "volume_capability": READER},
       times=1)
    ok(gpu, NODE_SOCK, "NodeStageVolume", stage_request(version, staging), times=1)
    pid = gpu.check_output("systemctl show -p MainPID --value fabric-csi.service").strip()
    gpu.run_expect([0], "systemctl kill -s KILL fabric-csi.service")
    assert wait_for(gpu, f"test \"$(systemctl show -p MainPID --value fabric-csi.service)\" != {pid} && "
                         f"test \"$(systemctl show -p MainPID --value fabric-csi.service)\" != 0", 120, 1)
    assert wait_for(gpu, f"{PLUGIN} call Probe --endpoint unix://{NODE_SOCK} --timeout 10", 120, 1)
    ok(gpu, NODE_SOCK, "NodeStageVolume", stage_request(version, staging))  # the kubelet may stage again
    ok(gpu, NODE_SOCK, "NodePublishVolume", publish_request(version, staging, pod_a))
    assert len(mounts_at(gpu, staging)) == 1 and len(mounts_at(gpu, pod_a)) == 1
    ok(gpu, NODE_SOCK, "NodeUnpublishVolume", {"volume_id": version, "target_path": pod_a})
    ok(gpu, NODE_SOCK, "NodeUnstageVolume", {"volume_id": version, "staging_target_path": staging})
    ok(gpu, CTRL_SOCK, "ControllerUnpublishVolume", {"volume_id": version, "node_id": GPU})
    assert json.loads(gpu.check_output("/usr/local/sbin/fabric-node gc --dry-run --json"))["steps"] == []


def test_unstage_while_the_storage_node_is_gone_leaves_no_orphan_session(csi_lab, version):
    """democratic-csi #536: a failed unstage left sessions that retried their login forever. Here the agent logs
    out of every portal of the version's target by name, whether or not the device is still there."""
    storage, gpu = csi_lab["storage"], csi_lab["gpu"]
    staging, (pod_a,) = kubelet_paths(version, "pod-a")
    kubelet_prepares(gpu, staging, [pod_a])
    ok(gpu, CTRL_SOCK, "ControllerPublishVolume", {"volume_id": version, "node_id": GPU, "volume_capability": READER},
       times=1)
    ok(gpu, NODE_SOCK, "NodeStageVolume", stage_request(version, staging), times=1)
    ok(gpu, NODE_SOCK, "NodePublishVolume", publish_request(version, staging, pod_a), times=1)
    ok(gpu, NODE_SOCK, "NodeUnpublishVolume", {"volume_id": version, "target_path": pod_a}, times=1)
    target = Fctl(storage).json("show", version)["target"]
    address = csi_lab["address"]
    step("storage1 unreachable from gpu1 (a blackhole route), then NodeUnstageVolume as the kubelet retries it")
    gpu.run_expect([0], f"ip route add blackhole {address}/32")
    answers = []
    try:
        for _ in range(3):  # the kubelet calls again after an error; at most three tries here
            rc, answer = csi(gpu, NODE_SOCK, "NodeUnstageVolume", {"volume_id": version,
                                                                   "staging_target_path": staging})
            answers.append(answer)
            if rc == 0:
                break
        sessions_while_gone = gpu.run("iscsiadm -m session 2>/dev/null").stdout
        records_while_gone = gpu.run("iscsiadm -m node 2>/dev/null").stdout
    finally:
        gpu.run(f"ip route del blackhole {address}/32")
    assert answers[-1] == {}, answers
    assert target not in sessions_while_gone and target not in records_while_gone
    assert mounts_at(gpu, staging) == [] and mounts_at(gpu, "/datasets/" + version.replace("@", "/")) == []
    assert json.loads(gpu.check_output("/usr/local/sbin/fabric-node gc --dry-run --json"))["steps"] == []
    # gpu1's logout never reached storage1: LIO keeps its end of the session until its NOP-In gets no answer
    # (nopin_timeout 15 s + nopin_response_timeout 30 s), and until then a revoke is refused as cutting a live
    # session. The external-attacher retries a failed ControllerUnpublish with a backoff; so does this test, for
    # at most 90 s, and then the second call must succeed too (idempotent)
    deadline, tries = time.monotonic() + 90, 0
    while True:
        tries += 1
        rc, answer = csi(gpu, CTRL_SOCK, "ControllerUnpublishVolume", {"volume_id": version, "node_id": GPU})
        if rc == 0 or time.monotonic() > deadline or "is logged in to" not in answer.get("message", ""):
            break
        time.sleep(5)
    assert rc == 0, (tries, answer)
    step(f"ControllerUnpublishVolume succeeded at try {tries}, once LIO let the dead session go")
    ok(gpu, CTRL_SOCK, "ControllerUnpublishVolume", {"volume_id": version, "node_id": GPU}, times=1)


def test_a_reconnect_leaves_exactly_one_mount_at_each_path(csi_lab, version):
    """democratic-csi #559: after a session reconnect a second mount was stacked on the staging path. Here the
    kubelet's repeated NodeStage and NodePublish after a reconnect leave one mount per path, still readable."""
    storage, gpu = csi_lab["storage"], csi_lab["gpu"]
    staging, (pod_a,) = kubelet_paths(version, "pod-a")
    kubelet_prepares(gpu, staging, [pod_a])
    ok(gpu, CTRL_SOCK, "ControllerPublishVolume", {"volume_id": version, "node_id": GPU, "volume_capability": READER},
       times=1)
    ok(gpu, NODE_SOCK, "NodeStageVolume", stage_request(version, staging), times=1)
    ok(gpu, NODE_SOCK, "NodePublishVolume", publish_request(version, staging, pod_a), times=1)
    target = Fctl(storage).json("show", version)["target"]
    address = csi_lab["address"]
    step("storage1 unreachable for 30 s (past the NOP-Out timeouts): the session fails and reconnects")
    since = gpu.check_output("date +%s").strip()
    gpu.run_expect([0], f"ip route add blackhole {address}/32")
    try:
        gpu.run("sleep 30")
    finally:
        gpu.run(f"ip route del blackhole {address}/32")
    assert wait_for(gpu, f"iscsiadm -m session -P 1 | grep -A 20 -F '{target}' | grep -q 'iSCSI Session State: "
                         "LOGGED_IN'", 300, 2)
    errors = gpu.run(f"journalctl -k --since @{since} --no-pager | grep -c 'detected conn error'").stdout.strip()
    assert int(errors or 0) >= 1  # the connection did fail and recover (a reconnect, not an idle session)
    for _ in range(2):  # what the kubelet sends again (after its own restart, or a remount)
        ok(gpu, NODE_SOCK, "NodeStageVolume", stage_request(version, staging), times=1)
        ok(gpu, NODE_SOCK, "NodePublishVolume", publish_request(version, staging, pod_a), times=1)
    assert len(mounts_at(gpu, staging)) == 1 and len(mounts_at(gpu, pod_a)) == 1
    assert gpu.run(f"cat {shlex.quote(pod_a)}/f > /dev/null").rc == 0
    ok(gpu, NODE_SOCK, "NodeUnpublishVolume", {"volume_id": version, "target_path": pod_a}, times=1)
    ok(gpu, NODE_SOCK, "NodeUnstageVolume", {"volume_id": version, "staging_target_path": staging}, times=1)
    ok(gpu, CTRL_SOCK, "ControllerUnpublishVolume", {"volume_id": version, "node_id": GPU}, times=1)
    assert target not in gpu.run("iscsiadm -m session 2>/dev/null").stdout
