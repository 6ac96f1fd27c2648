"""What the CSI plugin's unit tests share: the servicers over a simulated GPU node (csi_fake.CsiNode under the real
agent), requests as the kubelet and the sidecars build them, and a gRPC context whose abort raises."""

from __future__ import annotations

from csi_fake import CsiNode
from fabric_core.node import agent as agent_mod
from fabric_core.node import config as node_config
from support import FCTL_IQN_BASE, GPU1

from fabric_csi.node import NodeService
from fabric_csi.proto import csi_pb2

BASE = FCTL_IQN_BASE
P1, P2 = "10.77.0.11:3260", "10.77.0.12:3260"
V3 = f"{BASE}:ds.imagenet.v3"
CHAP = {"username": "gpu1", "password": "gpu1-s3cret-1", "username_in": "fabric-target", "password_in": "gpu1-m-1"}
RAW = {"host": "gpu1", "initiator": GPU1, "iqn_base": BASE, "mount_root": "/datasets",
       "storage_nodes": {"storage1": {"portal": P1}, "storage2": {"portal": P2}}, "multipath": True}
KUBELET = "/var/lib/kubelet"
STAGING = f"{KUBELET}/plugins/kubernetes.io/csi/csi.gpufabric.storage/5f0c/globalmount"
POD_A = f"{KUBELET}/pods/aaaa-1111/volumes/kubernetes.io~csi/imagenet-v3/mount"
POD_B = f"{KUBELET}/pods/bbbb-2222/volumes/kubernetes.io~csi/imagenet-v3/mount"
Mode = csi_pb2.VolumeCapability.AccessMode


class Aborted(Exception):
    """What grpc's ServicerContext.abort does: end the call with a status (here: raise it to the test)."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class Context:
    def abort(self, code, message):
        raise Aborted(code, message)


def call(service, method: str, request):
    """The answer of one call, or the Aborted status it ended with."""
    try:
        return getattr(service, method)(request, Context())
    except Aborted as status:
        return status


def node(*portals, down=(), **kw) -> CsiNode:
    return CsiNode(GPU1, grants={p: {V3} for p in portals}, down=down, **kw)


def config(tmp_path, **extra) -> node_config.NodeConfig:
    return node_config.parse({**RAW, "state_dir": str(tmp_path / "state"), **extra}, {"chap": CHAP})


def agent(tmp_path, fake, boot: str = "boot-1", **extra) -> agent_mod.Agent:
    return agent_mod.Agent(config(tmp_path, **extra), fake, boot_id=boot, lock_path=str(tmp_path / "node.lock"))


def service(tmp_path, fake, **kw) -> NodeService:
    return NodeService(agent(tmp_path, fake, **kw))


def capability(mode: str = "MULTI_NODE_READER_ONLY", *, block: bool = False, flags=(), fs: str = ""):
    cap = csi_pb2.VolumeCapability(access_mode=Mode(mode=Mode.Mode.Value(mode)))
    if block:
        cap.block.SetInParent()
    else:
        cap.mount.SetInParent()
        cap.mount.fs_type = fs
        cap.mount.mount_flags.extend(flags)
    return cap


def stage(volume="imagenet@v3", staging=STAGING, **cap):
    return csi_pb2.NodeStageVolumeRequest(volume_id=volume, staging_target_path=staging,
                                          volume_capability=capability(**cap))


def unstage(volume="imagenet@v3", staging=STAGING):
    return csi_pb2.NodeUnstageVolumeRequest(volume_id=volume, staging_target_path=staging)


def publish(target, volume="imagenet@v3", staging=STAGING, readonly=True, **cap):
    return csi_pb2.NodePublishVolumeRequest(volume_id=volume, staging_target_path=staging, target_path=target,
                                            volume_capability=capability(**cap), readonly=readonly)


def unpublish(target, volume="imagenet@v3"):
    return csi_pb2.NodeUnpublishVolumeRequest(volume_id=volume, target_path=target)


def changes(fake) -> list:
    """The commands that changed the simulated node (mounts, logins, records, units), in order."""
    reading = ("findmnt", "cat", "test", "readlink", "lsblk", "blkid", "fuser", "ps", "grep", "df", "udevadm")
    out = []
    for argv in fake.seen:
        if argv[0] in reading or argv[:2] == ["systemctl", "is-active"] or argv[:2] == ["systemctl", "is-enabled"]:
            continue
        if argv[0] == "iscsiadm" and not any(w in argv for w in ("--login", "--logout", "new", "update", "delete")):
            continue
        out.append(argv)
    return out

