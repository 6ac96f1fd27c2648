"""fabric_csi's controller service and its way to the storage nodes: ControllerPublish/Unpublish as fabricctl's grant
and revoke (the requests checked, fabricctl's failures as CSI's codes, idempotence), the SSH request a controller in
the cluster sends, and serve-grants, the storage node's forced command that runs nothing else."""

from __future__ import annotations

import json

import grpc
import pytest
from csi_support import Aborted, call, capability
from fabric_core.base.runner import Runner

from fabric_csi import serve_grants
from fabric_csi.backend import Fabricctl
from fabric_csi.controller import ControllerService
from fabric_csi.proto import csi_pb2

Code = grpc.StatusCode


def failure(error, error_type, status=1, fix="do this", **result):
    return status, json.dumps({**result, "error": error, "fix": fix, "exit_status": status, "error_type": error_type})


class FakeFabricctl(Runner):
    """fabricctl on a storage node: each request's answer from ``answers`` (verb -> (rc, stdout) or a function of
    the request's words), every argv kept in ``seen``."""

    def __init__(self, answers=None):
        super().__init__()
        self.answers = answers or {}
        self.seen = []

    def _run(self, argv, data):
        argv = list(argv)
        self.seen.append(argv)
        words = argv[1:] if argv[0] != "ssh" else argv[-1].split()
        answer = self.answers.get(words[0], (0, json.dumps({"ref": words[1], "nodes": {"storage1": {"new": []}}})))
        rc, out = answer(words) if callable(answer) else answer
        return rc, out, ""


def controller(answers=None, **kw):
    runner = FakeFabricctl(answers)
    return ControllerService(Fabricctl.local("/usr/local/sbin/fabricctl", runner=runner)), runner


def publish_req(volume="imagenet@v3", node="gpu1", **cap):
    return csi_pb2.ControllerPublishVolumeRequest(volume_id=volume, node_id=node, volume_capability=capability(**cap),
                                                  readonly=True)


def unpublish_req(volume="imagenet@v3", node="gpu1"):
    return csi_pb2.ControllerUnpublishVolumeRequest(volume_id=volume, node_id=node)


def test_publish_grants_the_version_to_the_node_and_again_changes_nothing_more():
    svc, runner = controller()
    for _ in range(2):
        assert call(svc, "ControllerPublishVolume", publish_req()) == csi_pb2.ControllerPublishVolumeResponse()
    assert runner.seen == [["/usr/local/sbin/fabricctl", "grant", "imagenet@v3", "--to", "gpu1", "--json"]] * 2


def test_publish_is_read_only_whatever_readonly_says_and_refuses_a_writable_mode_before_anything_runs():
    svc, runner = controller()
    request = publish_req()
    request.readonly = False
    assert call(svc, "ControllerPublishVolume", request) == csi_pb2.ControllerPublishVolumeResponse()
    for mode in ("SINGLE_NODE_WRITER", "MULTI_NODE_MULTI_WRITER"):
        status = call(svc, "ControllerPublishVolume", publish_req(mode=mode))
        assert status.code == Code.INVALID_ARGUMENT and "writable" in status.message
    for bad in (publish_req(node=""), publish_req(node="GPU_1"), publish_req(volume="x/../y@v1"),
                publish_req(block=True)):
        assert call(svc, "ControllerPublishVolume", bad).code == Code.INVALID_ARGUMENT
    assert len(runner.seen) == 1


@pytest.mark.parametrize(("answer", "code"), [
    (failure("unknown version imagenet@v9 (versions of imagenet: v3)", "NotFound"), Code.NOT_FOUND),
    (failure("unknown host or group 'gpu9'", "NotFound"), Code.NOT_FOUND),
    (failure("another fabric command holds this node's lock", "LockHeld", 4), Code.ABORTED),
    (failure("unexpected error: OSError()", "OSError", 5), Code.INTERNAL),
    (failure("refused: x", "Refused"), Code.PERMISSION_DENIED),
    ((255, ""), Code.INTERNAL),  # locally, no JSON: fabricctl did not answer
])
def test_fabricctls_failures_answer_with_csis_codes_and_its_problem_and_fix(answer, code):
    svc, _runner = controller({"grant": answer})
    status = call(svc, "ControllerPublishVolume", publish_req())
    assert isinstance(status, Aborted) and status.code == code, status
    if answer[1]:
        assert json.loads(answer[1])["error"] in status.message and "do this" in status.message


def test_a_grant_some_storage_nodes_missed_is_a_publish_the_node_can_use():
    partial = failure("grant imagenet@v3: storage2 did not grant it", "PartialFailure", 3,
                      nodes={"storage1": {"new": ["gpu1"]}}, unreachable={"storage2": "down"})
    svc, _runner = controller({"grant": partial})
    assert call(svc, "ControllerPublishVolume", publish_req()) == csi_pb2.ControllerPublishVolumeResponse()


def test_a_volume_id_naming_a_tag_is_refused_and_the_grant_it_made_is_taken_back():
    tagged = (0, json.dumps({"ref": "imagenet@v3", "tag": "prod", "nodes": {"storage1": {"new": ["gpu1"]}}}))
    svc, runner = controller({"grant": tagged})
    status = call(svc, "ControllerPublishVolume", publish_req(volume="imagenet@prod"))
    assert status.code == Code.INVALID_ARGUMENT and "volumeHandle imagenet@v3" in status.message
    assert runner.seen[-1][1:] == ["revoke", "imagenet@v3", "--from", "gpu1", "--json"]
    had = (0, json.dumps({"ref": "imagenet@v3", "tag": "prod", "nodes": {"storage1": {"new": []}}}))
    svc, runner = controller({"grant": had})  # granted before: not this call's to take back
    assert call(svc, "ControllerPublishVolume", publish_req(volume="imagenet@prod")).code == Code.INVALID_ARGUMENT
    assert [a[1] for a in runner.seen] == ["grant"]


def test_unpublish_revokes_and_an_unknown_version_or_node_is_already_unpublished():
    svc, runner = controller()
    for _ in range(2):
        assert call(svc, "ControllerUnpublishVolume", unpublish_req()) == csi_pb2.ControllerUnpublishVolumeResponse()
    assert runner.seen[0][1:] == ["revoke", "imagenet@v3", "--from", "gpu1", "--json"]
    svc, _runner = controller({"revoke": failure("unknown version imagenet@v9", "NotFound")})
    assert call(svc, "ControllerUnpublishVolume", unpublish_req()) == csi_pb2.ControllerUnpublishVolumeResponse()


def test_unpublish_while_the_node_is_still_logged_in_is_failed_precondition_and_retried():
    busy = failure("gpu1 is logged in to iqn...:ds.imagenet.v3: revoking now cuts a live session off", "Busy")
    svc, _runner = controller({"revoke": busy})
    status = call(svc, "ControllerUnpublishVolume", unpublish_req())
    assert status.code == Code.FAILED_PRECONDITION and "logged in" in status.message


def test_unpublish_from_every_node_revokes_each_host_the_version_is_granted_to():
    shown = (0, json.dumps({"version": "v3", "granted_to": ["gpu1", "gpu2"]}))
    svc, runner = controller({"show": shown})
    assert call(svc, "ControllerUnpublishVolume", unpublish_req(node="")) == \
        csi_pb2.ControllerUnpublishVolumeResponse()
    assert [a[1:4] for a in runner.seen] == [["show", "imagenet@v3", "--json"], ["revoke", "imagenet@v3", "--from"],
                                             ["revoke", "imagenet@v3", "--from"]]
    assert [a[4] for a in runner.seen[1:]] == ["gpu1", "gpu2"]


def test_validate_confirms_read_only_mounts_of_a_version_that_exists_only():
    svc, _runner = controller({"show": (0, json.dumps({"version": "v3"}))})
    ok = csi_pb2.ValidateVolumeCapabilitiesRequest(volume_id="imagenet@v3", volume_capabilities=[capability()])
    assert list(call(svc, "ValidateVolumeCapabilities", ok).confirmed.volume_capabilities) == [capability()]
    writable = csi_pb2.ValidateVolumeCapabilitiesRequest(volume_id="imagenet@v3", volume_capabilities=[
        capability(), capability("SINGLE_NODE_WRITER")])
    answer = call(svc, "ValidateVolumeCapabilities", writable)
    assert not answer.HasField("confirmed") and "writable" in answer.message
    empty = csi_pb2.ValidateVolumeCapabilitiesRequest(volume_id="imagenet@v3")
    assert call(svc, "ValidateVolumeCapabilities", empty).code == Code.INVALID_ARGUMENT
    svc, _runner = controller({"show": failure("unknown version imagenet@v9", "NotFound")})
    missing = csi_pb2.ValidateVolumeCapabilitiesRequest(volume_id="imagenet@v9", volume_capabilities=[capability()])
    assert call(svc, "ValidateVolumeCapabilities", missing).code == Code.NOT_FOUND


def test_capabilities_and_static_provisioning_only():
    svc, runner = controller()
    caps = {c.rpc.type for c in call(svc, "ControllerGetCapabilities",
                                     csi_pb2.ControllerGetCapabilitiesRequest()).capabilities}
    rpc = csi_pb2.ControllerServiceCapability.RPC
    assert caps == {rpc.PUBLISH_UNPUBLISH_VOLUME, rpc.PUBLISH_READONLY}
    assert call(svc, "CreateVolume", csi_pb2.CreateVolumeRequest(name="x")).code == Code.UNIMPLEMENTED
    assert call(svc, "DeleteVolume", csi_pb2.DeleteVolumeRequest(volume_id="x@v1")).code == Code.UNIMPLEMENTED
    assert runner.seen == []


# --- the controller in the cluster: one SSH request to a storage node --------------------------------------

def test_the_ssh_backend_sends_one_request_line_with_bounded_ssh_and_unreachable_is_unavailable():
    runner = FakeFabricctl()
    backend = Fabricctl.ssh("10.77.0.11", key="/etc/fabric-csi/id_ed25519", known_hosts="/etc/fabric-csi/known_hosts",
                            runner=runner)
    backend.grant("imagenet@v3", "gpu1")
    argv = runner.seen[0]
    assert argv[0] == "ssh" and argv[-2:] == ["10.77.0.11", "grant imagenet@v3 --to gpu1 --json"]
    assert {"BatchMode=yes", "ConnectTimeout=10", "StrictHostKeyChecking=yes", "ServerAliveInterval=5",
            "UserKnownHostsFile=/etc/fabric-csi/known_hosts"} <= set(argv)
    down = Fabricctl.ssh("10.77.0.11", key="k", known_hosts="h", runner=FakeFabricctl({"grant": (255, "")}))
    with pytest.raises(Exception) as caught:
        down.grant("imagenet@v3", "gpu1")
    assert caught.value.code == Code.UNAVAILABLE and "serve-grants" in caught.value.message
    assert "cannot read k, h" in down.health()


@pytest.mark.parametrize(("request_", "argv"), [
    ("grant imagenet@v3 --to gpu1 --json", ["grant", "imagenet@v3", "--to", "gpu1", "--json"]),
    ("revoke imagenet@v3 --from gpu1 --json", ["revoke", "imagenet@v3", "--from", "gpu1", "--json"]),
    ("show imagenet@v3 --json", ["show", "imagenet@v3", "--json"]),
    ("'grant' imagenet@v3 --to gpu1 --json", ["grant", "imagenet@v3", "--to", "gpu1", "--json"]),
])
def test_serve_grants_accepts_exactly_the_three_requests(request_, argv):
    assert serve_grants.parse(request_) == argv


@pytest.mark.parametrize("request_", [
    "", "   ", "id", "publish imagenet@v3 --to gpu1 --json", "grant imagenet@v3 --to gpu1",
    "grant imagenet@v3 --to gpu1 --json --dry-run", "grant imagenet@v3 --to gpu1,gpu2 --json",
    "grant imagenet@v3 --to gpu_nodes --json", "grant ../x@v1 --to gpu1 --json", "grant imagenet@v3 --from gpu1 --json",
    "revoke imagenet@v3 --from gpu1 --force --json", "grant imagenet@v3 --to gpu1 --json; id",
    "grant imagenet@v3 --to $(id) --json", "show imagenet@v3 gpu1 --json", "grant 'imagenet@v3 --to gpu1 --json",
    "grant imagenet@v3 --to gpu1 --json\nid", "show " + "x" * 300 + " --json", "dataset destroy imagenet --json",
])
def test_serve_grants_refuses_anything_else(request_):
    with pytest.raises(serve_grants.Refused):
        serve_grants.parse(request_)


def test_serve_grants_runs_fabricctl_in_its_place_or_answers_a_refusal_as_fabricctls_json(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(serve_grants.os, "execv", lambda path, argv: ran.append((path, argv)))
    monkeypatch.setattr(serve_grants, "_log", lambda text, refused: None)
    env = {serve_grants.ENV: "grant imagenet@v3 --to gpu1 --json"}
    serve_grants.main("/usr/local/sbin/fabricctl", env)
    assert ran == [("/usr/local/sbin/fabricctl",
                    ["/usr/local/sbin/fabricctl", "grant", "imagenet@v3", "--to", "gpu1", "--json"])]
    assert serve_grants.main("/usr/local/sbin/fabricctl", {serve_grants.ENV: "id"}) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["error_type"] == "Refused" and answer["exit_status"] == 1 and "refused" in answer["error"]
    assert len(ran) == 1
