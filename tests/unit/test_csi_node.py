"""fabric_csi's node service, called as the kubelet calls it, over the real agent on a simulated GPU node
(csi_fake.CsiNode): request validation and its codes, idempotence of every call, two pods on one node, the
orphaned-session and stacked-mount failures of peers' drivers, a plugin restarted between stage and publish."""

from __future__ import annotations

import grpc
import pytest
from csi_support import (
    P1,
    P2,
    POD_A,
    POD_B,
    STAGING,
    V3,
    Aborted,
    call,
    changes,
    node,
    publish,
    service,
    stage,
    unpublish,
    unstage,
)
from fabric_core.node import attachments as at

from fabric_csi.proto import csi_pb2

Code = grpc.StatusCode
MOUNT = "/datasets/imagenet/v3"


def one_ro_bind(fake, path, flags=("nodev", "nosuid", "ro")) -> bool:
    """``path`` holds exactly one mount: a bind of the version's file system (as the agent mounted it) with
    ``flags``."""
    layers = fake.binds().get(path, [])
    return len(layers) == 1 and layers[0][0] == fake.device_of(MOUNT) and set(flags) <= set(layers[0][2])


def staged(tmp_path, *portals, **kw):
    fake = node(*(portals or (P1,)), **kw)
    svc = service(tmp_path, fake)
    assert not isinstance(call(svc, "NodeStageVolume", stage()), Aborted)
    return fake, svc


# --- the kubelet's sequence ---------------------------------------------------------------------------------

def test_stage_attaches_through_the_agent_with_the_volumes_holder_and_binds_the_staging_path_read_only(tmp_path):
    fake = node(P1)
    svc = service(tmp_path, fake)
    assert call(svc, "NodeStageVolume", stage()) == csi_pb2.NodeStageVolumeResponse()
    record = at.Store(str(tmp_path / "state")).load("imagenet@v3")
    assert list(record.holders) == ["csi:imagenet@v3"] and record.state == "attached"
    assert fake.records[(V3, P1)]["node.startup"] == "manual"  # a pod's volume never logs in again by itself
    assert MOUNT in fake.transient and fake.mounts[MOUNT][2].startswith("ro,noload")
    assert one_ro_bind(fake, STAGING)
    before = len(changes(fake))
    assert call(svc, "NodeStageVolume", stage()) == csi_pb2.NodeStageVolumeResponse()  # again: nothing changes
    assert changes(fake)[before:] == []


def test_two_pods_publish_one_staged_volume_each_with_its_own_read_only_bind_and_unpublish_alone(tmp_path):
    fake, svc = staged(tmp_path)
    logins = sum(1 for a in fake.seen if a[-1] == "--login")
    for target, flags in ((POD_A, ()), (POD_B, ("noexec", "noatime"))):
        for _ in range(2):  # each call twice: the second changes nothing
            assert call(svc, "NodePublishVolume", publish(target, flags=flags)) == csi_pb2.NodePublishVolumeResponse()
    assert one_ro_bind(fake, POD_A) and one_ro_bind(fake, POD_B, flags=("ro", "noexec", "noatime"))
    assert sum(1 for a in fake.seen if a[-1] == "--login") == logins  # one session for both pods
    assert sum(1 for a in changes(fake) if a[:2] == ["mount", "--bind"]) == 3  # staging, pod A, pod B: once each
    stats = call(svc, "NodeGetVolumeStats", csi_pb2.NodeGetVolumeStatsRequest(volume_id="imagenet@v3",
                                                                              volume_path=POD_B))
    by_unit = {u.unit: u for u in stats.usage}
    assert by_unit[csi_pb2.VolumeUsage.BYTES].total == 67108864 and by_unit[csi_pb2.VolumeUsage.INODES].used == 12
    for _ in range(2):
        assert call(svc, "NodeUnpublishVolume", unpublish(POD_A)) == csi_pb2.NodeUnpublishVolumeResponse()
    assert POD_A not in fake.binds() and POD_A not in fake.dirs and one_ro_bind(fake, POD_B)
    assert MOUNT in fake.mounts


def test_unstage_is_refused_while_a_pod_still_shows_the_volume_and_then_leaves_no_session_record_or_mount(tmp_path):
    fake, svc = staged(tmp_path)
    call(svc, "NodePublishVolume", publish(POD_A))
    refused = call(svc, "NodeUnstageVolume", unstage())
    assert refused.code == Code.FAILED_PRECONDITION and POD_A in refused.message
    assert one_ro_bind(fake, STAGING) and fake.sessions  # nothing changed
    call(svc, "NodeUnpublishVolume", unpublish(POD_A))
    for _ in range(2):
        assert call(svc, "NodeUnstageVolume", unstage()) == csi_pb2.NodeUnstageVolumeResponse()
    assert not fake.binds() and not fake.mounts and not fake.sessions and not fake.records
    assert at.Store(str(tmp_path / "state")).refs() == []


def test_unstage_and_unpublish_of_a_volume_never_staged_here_are_ok_and_change_nothing(tmp_path):
    fake = node(P1)
    svc = service(tmp_path, fake)
    assert call(svc, "NodeUnpublishVolume", unpublish(POD_A)) == csi_pb2.NodeUnpublishVolumeResponse()
    assert call(svc, "NodeUnstageVolume", unstage()) == csi_pb2.NodeUnstageVolumeResponse()
    assert changes(fake) == []


def test_a_slurm_job_holding_the_same_version_keeps_its_mount_when_the_pod_is_done(tmp_path):
    fake = node(P1)
    svc = service(tmp_path, fake)
    svc.agent.attach("imagenet@v3", "job:42")
    call(svc, "NodeStageVolume", stage())
    call(svc, "NodeUnstageVolume", unstage())
    record = at.Store(str(tmp_path / "state")).load("imagenet@v3")
    assert list(record.holders) == ["job:42"] and MOUNT in fake.mounts and fake.sessions
    assert not fake.binds()


# --- bad requests: refused before anything runs -------------------------------------------------------------

@pytest.mark.parametrize("mode", ["SINGLE_NODE_WRITER", "MULTI_NODE_MULTI_WRITER", "MULTI_NODE_SINGLE_WRITER",
                                  "SINGLE_NODE_SINGLE_WRITER", "SINGLE_NODE_MULTI_WRITER"])
def test_a_writable_access_mode_is_refused_invalid_argument_and_nothing_runs(tmp_path, mode):
    fake = node(P1)
    svc = service(tmp_path, fake)
    for method, request in (("NodeStageVolume", stage(mode=mode)), ("NodePublishVolume", publish(POD_A, mode=mode))):
        status = call(svc, method, request)
        assert status.code == Code.INVALID_ARGUMENT and "writable" in status.message and "ReadOnlyMany" in \
            status.message
    assert fake.seen == []


@pytest.mark.parametrize("request_", [
    stage(volume=""), stage(volume="../x@v1"), stage(volume="imagenet"), stage(volume="a b@v1"),
    stage(volume="x" * 300), stage(volume="imagenet@../../etc"), stage(staging="relative/path"),
    stage(staging="/var/lib/kubelet/../../etc"), stage(staging=""), stage(mode="SINGLE_NODE_READER_ONLY"),
    stage(mode="UNKNOWN"), stage(block=True), stage(fs="btrfs"), stage(flags=["rw"]), stage(flags=["suid"]),
    csi_pb2.NodeStageVolumeRequest(volume_id="imagenet@v3", staging_target_path=STAGING),  # no capability
], ids=lambda r: "request")
def test_malformed_stage_requests_are_invalid_argument_and_nothing_runs(tmp_path, request_):
    fake = node(P1)
    status = call(service(tmp_path, fake), "NodeStageVolume", request_)
    assert isinstance(status, Aborted) and status.code == Code.INVALID_ARGUMENT, status
    assert fake.seen == []


def test_publish_before_stage_or_without_a_staging_path_is_failed_precondition(tmp_path):
    fake = node(P1)
    svc = service(tmp_path, fake)
    assert call(svc, "NodePublishVolume", publish(POD_A)).code == Code.FAILED_PRECONDITION
    assert call(svc, "NodePublishVolume", publish(POD_A, staging="")).code == Code.FAILED_PRECONDITION
    assert not fake.binds() and not fake.mounts


def test_a_version_not_granted_is_failed_precondition_naming_the_grant_and_leaves_nothing(tmp_path):
    fake = node()  # no storage node grants it
    svc = service(tmp_path, fake)
    status = call(svc, "NodeStageVolume", stage())
    assert status.code == Code.FAILED_PRECONDITION and "fabricctl grant imagenet@v3 --to gpu1" in status.message
    assert not fake.sessions and not fake.records and not fake.mounts and not fake.binds()
    assert at.Store(str(tmp_path / "state")).refs() == []


def test_storage_nodes_that_do_not_answer_are_unavailable_and_leave_nothing(tmp_path):
    fake = node(P1, P2, down=(P1, P2))
    status = call(service(tmp_path, fake), "NodeStageVolume", stage())
    assert status.code == Code.UNAVAILABLE and "storage1" in status.message
    assert not fake.sessions and not fake.records and not fake.mounts


def test_stats_of_a_path_that_does_not_show_the_volume_is_not_found(tmp_path):
    fake, svc = staged(tmp_path)
    request = csi_pb2.NodeGetVolumeStatsRequest(volume_id="imagenet@v3", volume_path=POD_A)
    assert call(svc, "NodeGetVolumeStats", request).code == Code.NOT_FOUND
    other = csi_pb2.NodeGetVolumeStatsRequest(volume_id="mnist@v1", volume_path=STAGING)
    assert call(svc, "NodeGetVolumeStats", other).code == Code.NOT_FOUND


# --- faults: stale and stacked mounts, a failed bind, a restart, calls racing ------------------------------

def test_stale_and_stacked_mounts_at_the_paths_are_replaced_by_one_bind_never_stacked_on(tmp_path):
    """democratic-csi #559: after a reconnect a new device was mounted on top of the stale one at the staging path.
    Here each path ends with exactly one mount, of the version's file system."""
    fake = node(P1)
    fake.stale(STAGING)
    fake.stale(STAGING, "8:224")
    svc = service(tmp_path, fake)
    call(svc, "NodeStageVolume", stage())
    assert one_ro_bind(fake, STAGING)
    fake.stale(POD_A)
    call(svc, "NodePublishVolume", publish(POD_A))
    assert one_ro_bind(fake, POD_A)
    fake.stale(STAGING)  # the staging path went stale under a published volume: the next publish rebuilds it
    call(svc, "NodePublishVolume", publish(POD_B))
    assert one_ro_bind(fake, STAGING) and one_ro_bind(fake, POD_B)


def test_a_stage_whose_read_only_bind_fails_leaves_no_writable_bind_no_holder_and_no_session(tmp_path):
    """A failure the kubelet takes as final (it never unstages then) must leave nothing: democratic-csi #536's
    orphaned sessions came from such paths."""
    fake = node(P1)
    fake.fail_remount = True
    svc = service(tmp_path, fake)
    status = call(svc, "NodeStageVolume", stage())
    assert status.code == Code.INTERNAL and "read-only" in status.message
    assert not fake.binds() and not fake.sessions and not fake.records and not fake.mounts
    assert at.Store(str(tmp_path / "state")).refs() == []


def test_a_failed_bind_of_a_retried_stage_keeps_the_holder_the_earlier_call_recorded(tmp_path):
    fake, svc = staged(tmp_path)
    fake.layers.clear()
    fake.fail_remount = True
    assert call(svc, "NodeStageVolume", stage()).code == Code.INTERNAL
    assert list(at.Store(str(tmp_path / "state")).load("imagenet@v3").holders) == ["csi:imagenet@v3"]
    fake.fail_remount = False
    assert call(svc, "NodeStageVolume", stage()) == csi_pb2.NodeStageVolumeResponse()
    assert one_ro_bind(fake, STAGING)


def test_a_plugin_restarted_between_stage_and_publish_continues_from_the_agents_records(tmp_path):
    fake, _first = staged(tmp_path)
    second = service(tmp_path, fake)  # a new process: a new agent over the same node and state directory
    assert call(second, "NodePublishVolume", publish(POD_A)) == csi_pb2.NodePublishVolumeResponse()
    assert one_ro_bind(fake, POD_A)
    call(second, "NodeUnpublishVolume", unpublish(POD_A))
    call(second, "NodeUnstageVolume", unstage())
    assert not fake.sessions and not fake.records and not fake.mounts


def test_a_plugin_killed_after_the_attach_leaves_a_holder_that_the_next_stage_finishes_or_unstage_removes(tmp_path):
    fake = node(P1)
    svc = service(tmp_path, fake)
    svc.agent.attach("imagenet@v3", "csi:imagenet@v3")  # what a stage did before it was killed (no bind yet)
    assert call(svc, "NodeUnstageVolume", unstage()) == csi_pb2.NodeUnstageVolumeResponse()
    assert not fake.sessions and not fake.records and not fake.mounts
    svc.agent.attach("imagenet@v3", "csi:imagenet@v3")
    assert call(svc, "NodeStageVolume", stage()) == csi_pb2.NodeStageVolumeResponse()
    assert one_ro_bind(fake, STAGING)


def test_after_a_reboot_the_boot_time_gc_drops_the_volumes_holder(tmp_path):
    fake, svc = staged(tmp_path)
    record = at.Store(str(tmp_path / "state")).load("imagenet@v3")
    steps = at.plan_gc([record], sessions=[], node_records=[], mounts=[], target_prefix=V3.rsplit(":", 1)[0] + ":ds.",
                       mount_root="/datasets", boot_id="boot-2")
    assert [(s.kind, s.params.get("holder", "")) for s in steps][:2] == [("drop_holder", "csi:imagenet@v3"),
                                                                         ("detach", "")]
    assert at.holder_stale("csi:imagenet@v3", record.holders["csi:imagenet@v3"], boot_id="boot-1",
                           is_alive=lambda job: False) == ""  # same boot: a pod's holder is never a job's


def test_a_second_call_on_a_volume_in_progress_is_aborted_at_once(tmp_path):
    fake = node(P1)
    svc = service(tmp_path, fake)
    with svc.inflight.hold("imagenet@v3", "NodeStageVolume"):  # another thread's stage, still running
        status = call(svc, "NodeStageVolume", stage())
    assert status.code == Code.ABORTED and "in progress" in status.message and fake.seen == []


def test_identity_of_the_node_and_its_capabilities(tmp_path):
    svc = service(tmp_path, node(P1))
    assert call(svc, "NodeGetInfo", csi_pb2.NodeGetInfoRequest()).node_id == "gpu1"
    caps = {c.rpc.type for c in call(svc, "NodeGetCapabilities", csi_pb2.NodeGetCapabilitiesRequest()).capabilities}
    rpc = csi_pb2.NodeServiceCapability.RPC
    assert caps == {rpc.STAGE_UNSTAGE_VOLUME, rpc.GET_VOLUME_STATS}


def test_the_holder_grammar_takes_a_volume_and_nothing_that_is_not_one():
    assert at.validate_holder("csi:imagenet@v3") == "csi:imagenet@v3"
    for bad in ("csi:", "csi:imagenet", "csi:../x@v1", "csi:a b@v1", "csi:" + "x" * 70 + "@v1", "csi:x@v1/../.."):
        with pytest.raises(at.InvalidName):
            at.validate_holder(bad)
