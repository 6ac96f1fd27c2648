#!/usr/bin/env python3
"""Benchmark of issue 30 on the lab: what the CSI plugin adds to the agent's attach.

Issue 30 asks: "time of NodeStage+NodePublish for a version on one node against the agent's attach alone (the
overhead of the plugin; key csi_stage_publish_over_attach, target <=1.2)."

Both sides run on gpu1 in one Python process of the agent's virtualenv (/opt/fabric-node/bin/python: fabric_core,
grpc and protobuf imported once, no ssh and no interpreter start in the measured time), each from nothing (no
session, node record or mount of the version before it):

* A, the attach alone: ``Agent(config.load(), LocalRunner()).attach(REF, "job:csibench")``, what the Slurm
  prolog's `fabric-node attach` runs (its process start is left out: the kubelet's gRPC client is long-lived too);
* B, NodeStageVolume + NodePublishVolume: the two calls the kubelet makes, over the node plugin's real socket
  (fabric-csi.service), with a staging path and a pod's target path as the kubelet lays them out.

After each, untimed, the same undoes it (detach; NodeUnpublish + NodeUnstage). Rounds alternate the order
(A B, B A, ...); figures are medians; the ratio is median(B) / median(A).

The version is this benchmark's own (benchcsi@v1: 32 small files, granted to gpu1), made when missing and
destroyed at the end (`--keep` keeps it). Precondition: the lab up and converged with the node plugin on gpu1
(`ansible-playbook playbooks/gpu.yml --tags agent -e '{"fabric_node_csi": true}'`). Run as root on the lab's
host: `.venv/bin/python bench/csi_bench.py [--rounds N]` (default 5). It writes the `csi` section of
docs/benchmarks.md and bench/results/csi.json.
"""

from __future__ import annotations

import json
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from labbench import BenchError, bench_args, run_bench, say, ssh  # noqa: E402
from report import commit, now, write_json  # noqa: E402

SECTION = "csi"
STORAGE, GPU = "storage1", "gpu1"
DATA = "benchcsi"
REF = f"{DATA}@v1"
SRC = f"/srv/{DATA}-src"
PYTHON = "/opt/fabric-node/bin/python"
SOCK = "/var/lib/kubelet/plugins/csi.gpufabric.storage/csi.sock"

# Runs on gpu1 with the agent's interpreter. argv: rounds, ref, socket.
LOOP = r'''
import json, subprocess, sys, time
import grpc
from fabric_core.base.runner import LocalRunner
from fabric_core.node import agent as agent_mod, config
from fabric_csi.proto import csi_pb2, csi_pb2_grpc

rounds, ref, sock = int(sys.argv[1]), sys.argv[2], sys.argv[3]
agent = agent_mod.Agent(config.load(), LocalRunner())
node = csi_pb2_grpc.NodeStub(grpc.insecure_channel(f"unix://{sock}"))
cap = csi_pb2.VolumeCapability(access_mode=csi_pb2.VolumeCapability.AccessMode(
    mode=csi_pb2.VolumeCapability.AccessMode.MULTI_NODE_READER_ONLY))
cap.mount.SetInParent()
staging = "/var/lib/kubelet/plugins/kubernetes.io/csi/csi.gpufabric.storage/benchcsi/globalmount"
target = "/var/lib/kubelet/pods/benchcsi-pod/volumes/kubernetes.io~csi/benchcsi/mount"
subprocess.run(["mkdir", "-p", staging, target.rsplit("/", 1)[0]], check=True)

def clean():
    """Nothing of the version on this node: no holder, session, node record or mount."""
    listed = agent.list()
    mine = [a for a in listed["attachments"] if a["ref"] == ref]
    if mine or any(s["target"].endswith(ref.replace("@", ".")) for s in listed["sessions"]):
        raise SystemExit(f"{ref} is still attached: {mine or listed['sessions']}")

def attach_alone():
    clean()
    started = time.monotonic()
    agent.attach(ref, "job:csibench")
    seconds = time.monotonic() - started
    agent.detach(ref, "job:csibench")
    return seconds

def stage_publish():
    clean()
    started = time.monotonic()
    node.NodeStageVolume(csi_pb2.NodeStageVolumeRequest(volume_id=ref, staging_target_path=staging,
                                                        volume_capability=cap), timeout=600)
    node.NodePublishVolume(csi_pb2.NodePublishVolumeRequest(volume_id=ref, staging_target_path=staging,
                                                            target_path=target, volume_capability=cap,
                                                            readonly=True), timeout=600)
    seconds = time.monotonic() - started
    node.NodeUnpublishVolume(csi_pb2.NodeUnpublishVolumeRequest(volume_id=ref, target_path=target), timeout=600)
    node.NodeUnstageVolume(csi_pb2.NodeUnstageVolumeRequest(volume_id=ref, staging_target_path=staging),
                           timeout=600)
    return seconds

runs = {"attach": [], "stage_publish": []}
for r in range(rounds):
    order = (("attach", attach_alone), ("stage_publish", stage_publish))
    for key, fn in (order if r % 2 == 0 else order[::-1]):
        runs[key].append(round(fn(), 3))
clean()
print(json.dumps(runs))
'''


def fctl(*args: str, check: bool = True):
    return ssh(STORAGE, "fabricctl " + " ".join(shlex.quote(a) for a in args), check=check, timeout=900)


def preflight() -> dict:
    if ssh(GPU, f"test -x {PYTHON} && {PYTHON} -c 'import fabric_csi.node, grpc'", check=False).returncode != 0:
        raise BenchError(f"{GPU} has no CSI plugin in the agent's virtualenv: converge the node agent first")
    if ssh(GPU, f"test -S {SOCK} && systemctl is-active --quiet fabric-csi.service", check=False).returncode != 0:
        raise BenchError(f"the node plugin does not run on {GPU}: `ansible-playbook playbooks/gpu.yml --tags agent "
                         "-e '{\"fabric_node_csi\": true}'`")
    return {}


def datasets() -> dict:
    return {d["name"]: d for d in json.loads(fctl("list", "--json").stdout)["datasets"]}


def ensure_version() -> None:
    have = datasets()
    if DATA not in have:
        say(f"{DATA}: create, ingest 32 files, seal v1")
        fctl("dataset", "create", DATA, "--size", "64M")
        ssh(STORAGE, f"rm -rf {SRC} && mkdir -p {SRC} && for i in $(seq 1 32); do head -c $((4096 * i)) "
                     f"/dev/urandom > {SRC}/f$i; done")
        fctl("dataset", "ingest", DATA, f"{SRC}/")
    if DATA not in have or not any(v["version"] == "v1" for v in have[DATA]["versions"]):
        fctl("dataset", "seal", DATA, "v1", "--note", "bench/csi_bench.py")
    fctl("grant", REF, "--to", GPU)


def cleanup(keep: bool) -> list[str]:
    left = []
    if ssh(GPU, f"findmnt -n /datasets/{DATA}/v1", check=False).returncode == 0:
        left.append(f"{REF} is still mounted on {GPU}")
    ssh(GPU, "rm -rf /var/lib/kubelet/pods/benchcsi-pod", check=False)
    if keep or left:
        return left
    try:
        if DATA in datasets():
            fctl("revoke", REF, "--from", GPU, check=False)
            fctl("dataset", "destroy", DATA, "--yes")
        ssh(STORAGE, f"rm -rf {SRC}")
    except BenchError as exc:
        left.append(str(exc))
    return left


def measure(rounds: int) -> dict:
    ensure_version()
    say(f"{rounds} rounds on {GPU}: the agent's attach alone, then NodeStage+NodePublish over the plugin's socket")
    ssh(GPU, "cat > /tmp/.bench-csi.py", input_text=LOOP)
    out = ssh(GPU, f"{PYTHON} /tmp/.bench-csi.py {rounds} {REF} {SOCK}", timeout=7200).stdout
    runs = json.loads(out.strip().splitlines()[-1])
    attach, both = statistics.median(runs["attach"]), statistics.median(runs["stage_publish"])
    return {"rounds": rounds, "runs": runs,
            "figures": {"attach_s": round(attach, 3), "stage_publish_s": round(both, 3)},
            "ratios": {"csi_stage_publish_over_attach": round(both / attach, 3) if attach else None}}


def rows(result: dict, when: str) -> list[str]:
    f, r = result["figures"], result["ratios"]
    return [
        "## The CSI plugin's overhead (issue 30, `bench/csi_bench.py`)",
        "",
        f"{when}, commit {commit()}, {result['rounds']} rounds on {GPU}, each from nothing: the agent's attach "
        f"of {REF} in-process (what `fabric-node attach` runs) against NodeStageVolume + NodePublishVolume over "
        "the node plugin's socket (an iSCSI login, the read-only mount, the staging bind, the pod's bind). "
        "Medians; target: at most 1.2.",
        "",
        "| attach alone | NodeStage + NodePublish | ratio |",
        "|---|---|---|",
        f"| {f['attach_s']} s | {f['stage_publish_s']} s | **{r['csi_stage_publish_over_attach']}** |",
    ]


def main() -> int:
    args = bench_args(__doc__, rounds=5, rounds_help="rounds of the two", keep=REF)
    result: dict = {}

    def run(_lab) -> dict:
        result.update(measure(args.rounds))
        return result

    def report(done: dict, when: str) -> list[str]:
        write_json("csi", {"date": now(), "commit": commit(), "lab": "QEMU TCG lab (docs/lab.md)",
                           "figures": done["figures"], "ratios": done["ratios"],
                           "runs": {"rounds": done["rounds"], "seconds": done["runs"]}})
        return rows(done, when)

    return run_bench("bench-csi", SECTION, checking="up, converged, the node plugin on gpu1", preflight=preflight,
                     leftovers=lambda _lab: [] if not args.cleanup_only else cleanup(False),
                     cleanup_only=args.cleanup_only, measure=run, cleanup=lambda _lab: cleanup(args.keep),
                     rows=lambda _lab, done, when: report(done, when), partial=lambda: result)


if __name__ == "__main__":
    sys.exit(main())
