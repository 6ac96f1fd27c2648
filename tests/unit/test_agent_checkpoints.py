"""A job's checkpoints through the GPU node's agent (issue 29 item 3): the checkpoint verbs of `fabric-node --ssh`
(attach-writable, detach-writable, attach-restore, detach-restore, freeze, thaw, writer-state,
refresh-credentials), each argument checked by the forced command's parser (fabric_node.ssh) before anything
runs; the agent's side on a simulated GPU node (node_fake.FakeNode, with a writer's freeze added); and fabricctl's
checkpoint commands and access sync asking for them through node.client.AgentClient, end to end through
`fabric-node --ssh --from storage1`, with no shell runner anywhere."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import threading

import pytest
import test_publishing
from fabric_core.base.runner import Runner
from fabric_core.node import agent as agent_mod
from fabric_core.node import config as node_config
from fabric_core.node import freeze, mounts
from fabric_core.node.client import AgentClient, AgentError, AgentWriter
from fabric_core.services import publish
from fabric_core.storage import lio, lzc
from node_fake import FakeNode
from support import FCTL_IQN_BASE, GPU1, GPU2

from fabric_node import main as cli
from fabric_node import ssh
from fabricctl import context

BASE = FCTL_IQN_BASE
P1, P2 = "10.77.0.11:3260", "10.77.0.12:3260"  # storage1 (fabricctl's portal in test_publishing.CONFIG), storage2
RW = f"{BASE}:ck.llama.rw"
S100 = f"{BASE}:ck.llama.s100"
SECRETS = ("gpu1-s3cret-1", "gpu1-mutual-1", "gpu1-rotated-22")
fabricctl_node, lio_state = test_publishing.fabricctl_node, test_publishing.lio_state  # its fixtures, used here


# ---- the forced command's parser: each checkpoint verb, its arguments checked -------------------------------

@pytest.mark.parametrize("text, argv", [
    ("attach-writable llama --fs ext4 --json", ["attach-writable", "llama", "--fs", "ext4", "--from", "storage1",
                                                "--json"]),
    ("attach-writable llama --fs=xfs --dry-run --json", ["attach-writable", "llama", "--fs", "xfs", "--from",
                                                         "storage1", "--json", "--dry-run"]),
    ("detach-writable llama --force --json", ["detach-writable", "llama", "--from", "storage1", "--json", "--force"]),
    ("attach-restore llama 12000 --fs ext4", ["attach-restore", "llama", "12000", "--fs", "ext4", "--from",
                                              "storage1"]),
    ("attach-restore llama 0 --fs ext4", ["attach-restore", "llama", "0", "--fs", "ext4", "--from", "storage1"]),
    ("attach-restore llama 007 --fs ext4", ["attach-restore", "llama", "7", "--fs", "ext4", "--from", "storage1"]),
    ("detach-restore llama 12000 --json", ["detach-restore", "llama", "12000", "--from", "storage1", "--json"]),
    ("freeze llama --seconds 30 --json", ["freeze", "llama", "--seconds", "30", "--json"]),
    ("freeze llama --seconds 5 --json --dry-run", ["freeze", "llama", "--seconds", "5", "--json", "--dry-run"]),
    ("thaw llama --seconds 3600 --json", ["thaw", "llama", "--seconds", "3600", "--json"]),
    ("writer-state llama bert-2 --json", ["writer-state", "llama", "bert-2", "--json"]),
    ("refresh-credentials --json --dry-run", ["refresh-credentials", "--json", "--dry-run"]),
])
def test_the_checkpoint_verbs_with_valid_arguments_are_served(text, argv):
    assert ssh.parse(text, "storage1") == argv


@pytest.mark.parametrize("text", [
    # names: a job's rule; steps: whole numbers; no path, no free-form word
    "attach-writable ../etc --fs ext4", "attach-writable /etc --fs ext4", "attach-writable LLAMA --fs ext4",
    "attach-writable 'lla ma' --fs ext4", "attach-writable " + "a" * 31 + " --fs ext4", "attach-writable llama",
    "attach-writable llama --fs btrfs", "attach-writable llama --fs 'ext4;id'", "attach-writable llama extra --fs ext4",
    "attach-writable llama --fs ext4 --fs xfs", "attach-writable --fs ext4",
    "attach-restore llama --fs ext4", "attach-restore llama -1 --fs ext4", "attach-restore llama 1e3 --fs ext4",
    "attach-restore llama ../1 --fs ext4", "attach-restore llama " + "9" * 19 + " --fs ext4",
    "attach-restore llama 12 13 --fs ext4", "detach-restore llama", "detach-restore llama x1",
    # the storage node is the key's, never the request's
    "attach-writable llama --fs ext4 --from storage2", "detach-writable llama --from=storage2",
    "detach-restore llama 1 --from storage2",
    # the freeze's bound and its job
    "freeze llama", "freeze llama --seconds 4", "freeze llama --seconds 3601", "freeze llama --seconds x",
    "freeze llama --seconds -5", "freeze ../x --seconds 30", "freeze llama bert --seconds 30",
    "thaw llama", "thaw llama --seconds 30 --force", "thaw llama --seconds 30 --dry-run",
    "writer-state", "writer-state llama llama", "writer-state ../x",
    "writer-state " + " ".join(f"j{n}" for n in range(65)),
    "refresh-credentials gpu1", "refresh-credentials --password x", "refresh-credentials --config /tmp/x.json",
    # no other option, no shell
    "detach-writable llama --all", "attach-writable llama --fs ext4; id", "freeze llama --seconds 30 && id",
    "detach-writable llama --holder manual", "attach-writable llama --fs ext4 --ssh",
])
def test_every_other_checkpoint_request_is_refused(text):
    with pytest.raises(ssh.Refused) as err:
        ssh.parse(text, "storage1")
    assert err.value.problem.startswith("refused:") and "agent's verbs" in err.value.fix


@pytest.mark.parametrize("verb", ["attach-writable llama --fs ext4", "detach-writable llama",
                                  "attach-restore llama 1 --fs ext4", "detach-restore llama 1"])
def test_a_key_bound_to_no_storage_node_may_not_log_in_or_out(verb):
    """A forced command without --from (a line an older role wrote) serves no verb that logs in or out: the agent
    would not know which storage node's session it is."""
    with pytest.raises(ssh.Refused, match="bound to none"):
        ssh.parse(verb)
    assert ssh.parse("freeze llama --seconds 30") == ["freeze", "llama", "--seconds", "30"]  # none needed


def test_the_forced_command_takes_only_from_node(tmp_path, capsys):
    env = {"SSH_ORIGINAL_COMMAND": "refresh-credentials --json"}
    assert cli.main(["--ssh", "--from", "storage1", "extra"], agent=lambda dry: pytest.fail("ran"), environ=env) == 1
    assert cli.main(["--ssh", "--to", "storage1"], agent=lambda dry: pytest.fail("ran"), environ=env) == 1
    assert cli.main(["--ssh", "--from", "../x"], agent=lambda dry: pytest.fail("ran"),
                    environ={"SSH_ORIGINAL_COMMAND": "detach-writable llama --json"}) == 1
    assert "refused" in json.loads(capsys.readouterr().out.splitlines()[-1])["problem"]


# ---- the agent's side, on a simulated GPU node ----------------------------------------------------------------

class WriterNode(FakeNode):
    """A GPU node that can also be a checkpoint's writer: sync, the thaw timer (systemd-run), the freeze and thaw
    under their lock (flock), and what `fabricctl status --writers` reads. ``in_flight``: a freeze holds the lock."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.timers: set = set()
        self.frozen: set = set()
        self.in_flight = False

    def _run(self, argv, data):
        a = list(argv)
        if a[:2] == ["sync", "-f"]:
            self.seen.append(a)
            return 0, "", ""
        if a[:1] == ["systemd-run"]:
            self.seen.append(a)
            self.timers.add(a[1][len("--unit="):])
            return 0, "", ""
        if a[:1] == ["flock"]:
            self.seen.append(a)
            if self.in_flight:
                return freeze.BUSY, "", ""
            what = a[6:]
            if what[:2] == ["sh", "-c"] and what[2] == freeze.RECOVER:
                self.frozen.discard(what[-1])
                self.timers.discard(what[-2])
                return 0, "", ""
            if what[:2] == ["sh", "-c"] and what[2] == freeze.FREEZE:
                if what[-2] not in self.timers:
                    return freeze.LATE, "", "the safety timer is not waiting: not freezing\n"
                self.frozen.add(what[-1])
                return 0, "", ""
            if what[:2] == ["fsfreeze", "-u"]:
                if what[2] in self.frozen:
                    self.frozen.discard(what[2])
                    return 0, "", ""
                return 1, "", f"fsfreeze: {what[2]}: thaw failed: Invalid argument\n"
        if a[:2] == ["systemctl", "stop"] and a[2].endswith(".timer"):
            self.seen.append(a)
            self.timers.discard(a[2][: -len(".timer")])
            return 0, "", ""
        if a[:2] == ["systemctl", "show"]:
            self.seen.append(a)
            blocks = [f"Id={u}\nActiveState={'active' if u[:-len('.timer')] in self.timers else 'inactive'}\n"
                      f"ActiveEnterTimestampMonotonic=90000000\nNextElapseUSecMonotonic=2min" for u in a
                      if u.endswith(".timer")]
            return 0, "\n\n".join(blocks) + "\n", ""
        if a == ["cat", "/proc/uptime"]:
            self.seen.append(a)
            return 0, "100.00 50.00\n", ""
        if a[:2] == ["sh", "-c"] and a[2] == freeze.BLOCKED_SCRIPT:
            self.seen.append(a)
            return 0, "", ""
        return super()._run(argv, data)


def node_cfg(tmp_path, name: str = "gpu1", initiator: str = GPU1) -> node_config.NodeConfig:
    raw = {"host": name, "initiator": initiator, "iqn_base": BASE, "mount_root": "/datasets",
           "checkpoint_mount_root": "/checkpoints", "state_dir": str(tmp_path / name),
           "storage_nodes": {"storage1": {"portal": P1}, "storage2": {"portal": P2}}}
    chap = {"username": name, "password": f"{name}-s3cret-1", "username_in": "storage1",
            "password_in": f"{name}-mutual-1"}
    return node_config.parse(raw, {"chap": chap})


def granted(*targets: str) -> WriterNode:
    """gpu1, granted ``targets`` by storage1; storage2 grants it nothing."""
    return WriterNode(GPU1, grants={P1: set(targets), P2: set()})


def make_agent(tmp_path, node, cfg=None) -> agent_mod.Agent:
    return agent_mod.Agent(cfg or node_cfg(tmp_path), node, boot_id="b", lock_path=str(tmp_path / "node.lock"))


def test_the_writer_attaches_its_volume_read_write_from_the_storage_node_that_asked(tmp_path):
    node = granted(RW)
    out = make_agent(tmp_path, node).checkpoints.attach("llama", storage_node="storage1", fstype="ext4")
    assert (out["path"], out["kind"], out["target"], out["portal"]) == ("/checkpoints/llama", "writable", RW, P1)
    assert list(node.sessions) == [(RW, P1)] and (RW, P2) not in node.records  # storage1's session only
    assert node.records[(RW, P1)]["node.startup"] == "automatic"  # it comes back at boot, as fabricctl's did
    assert node.mounts["/checkpoints/llama"][2].startswith("rw,")
    unit = node.files[f"/etc/systemd/system/{mounts.unit_name('/checkpoints/llama')}"]
    assert "# fabric-owner: fabricctl" in unit and "Description=fabric checkpoint llama@rw" in unit
    assert not any(s in json.dumps(node.seen) + json.dumps(out) for s in SECRETS)  # secrets only on stdin
    assert node.records[(RW, P1)]["node.session.auth.password"] == "gpu1-s3cret-1"
    again = make_agent(tmp_path, node).checkpoints.attach("llama", storage_node="storage1", fstype="ext4")
    assert again["changed"] is False and again["commands"] == []


def test_a_restore_is_mounted_read_only_and_taken_off_again(tmp_path):
    node = granted(S100)
    ck = make_agent(tmp_path, node).checkpoints
    out = ck.attach("llama", storage_node="storage1", fstype="ext4", step="100")
    assert (out["path"], out["kind"], out["step"], out["target"]) == ("/checkpoints/llama/restore/100", "restore",
                                                                     100, S100)
    assert node.mounts["/checkpoints/llama/restore/100"][2].startswith("ro,noload")
    node.busy["/checkpoints/llama/restore/100"] = ["4242 python3"]
    with pytest.raises(Exception, match="in use by 4242 python3"):
        ck.detach("llama", storage_node="storage1", step=100)
    assert node.mounts and node.sessions  # refused: nothing changed
    gone = ck.detach("llama", storage_node="storage1", step=100, force=True)
    assert gone["changed"] and not node.mounts and not node.sessions and not node.records


def test_a_checkpoint_from_a_storage_node_that_did_not_grant_it_or_is_unknown_changes_nothing(tmp_path):
    node = granted()
    ck = make_agent(tmp_path, node).checkpoints
    with pytest.raises(Exception, match="authorization|refused|not"):
        ck.attach("llama", storage_node="storage1", fstype="ext4")
    assert not node.mounts and not node.sessions
    with pytest.raises(Exception, match="not one of this node's storage nodes"):
        ck.attach("llama", storage_node="storage9", fstype="ext4")
    with pytest.raises(Exception, match="invalid job name"):
        ck.attach("../../etc", storage_node="storage1", fstype="ext4")
    with pytest.raises(Exception, match="invalid step"):
        ck.detach("llama", storage_node="storage1", step="-1")
    assert not node.files and not any(a[:1] == ["mkdir"] for a in node.seen)


def test_the_writers_freeze_is_under_its_timer_and_the_thaw_stops_it(tmp_path):
    node = granted(RW)
    ck = make_agent(tmp_path, node).checkpoints
    ck.attach("llama", storage_node="storage1", fstype="ext4")
    unit = freeze.thaw_unit("/checkpoints/llama")
    out = ck.freeze("llama", 30, since=None)
    assert out["frozen"] and node.frozen == {"/checkpoints/llama"} and node.timers == {unit}
    arm = next(a for a in node.seen if a[:1] == ["systemd-run"])
    assert arm == freeze.arm_argv("/checkpoints/llama", 30)  # the watchdog that thaws it whatever happens
    state = ck.writer_state(["llama"])
    assert list(state["frozen"]) == ["/checkpoints/llama"] and state["jobs"] == {"llama": "/checkpoints/llama"}
    assert ck.thaw("llama", 30)["thawed"] and not node.frozen and not node.timers
    assert ck.writer_state(["llama"])["frozen"] == {}


def test_a_freeze_is_refused_where_the_volume_is_not_mounted_read_write(tmp_path):
    node = granted(S100)
    ck = make_agent(tmp_path, node).checkpoints
    with pytest.raises(freeze.FreezeRefused, match="not mounted read-write"):
        ck.freeze("llama", 30)
    ck.attach("llama", storage_node="storage1", fstype="ext4", step=100)  # a restore is read-only: no freeze
    with pytest.raises(freeze.FreezeRefused):
        ck.freeze("llama", 30)
    assert not node.timers and not node.frozen and not any(a[:1] in (["sync"], ["flock"]) for a in node.seen)


def test_refresh_credentials_writes_this_nodes_own_secret_into_the_fabrics_records_only(tmp_path):
    node = granted(RW)
    ag = make_agent(tmp_path, node)
    ag.checkpoints.attach("llama", storage_node="storage1", fstype="ext4")
    v3 = f"{BASE}:ds.imagenet.v3"
    node.records[(v3, P2)] = {"node.startup": "manual", "node.session.auth.password": "old"}  # a job's, no session
    other = ("iqn.2003-01.org.example:other", P1)
    node.records[other] = {"node.startup": "automatic", "node.session.auth.password": "theirs"}
    rotated = node_config.parse({"host": "gpu1", "initiator": GPU1, "iqn_base": BASE,
                                 "state_dir": str(tmp_path / "gpu1"),
                                 "storage_nodes": {"storage1": {"portal": P1}, "storage2": {"portal": P2}}},
                                {"chap": {"username": "gpu1", "password": "gpu1-rotated-22",  # credentials.json rotated
                                          "username_in": "storage1", "password_in": "gpu1-mutual-1"}})
    logins = sum(1 for a in node.seen if a[-1:] == ["--login"])
    out = make_agent(tmp_path, node, rotated).refresh_credentials()
    assert sorted(r["target"] for r in out["records"]) == [RW, v3] and out["changed"]
    assert node.records[(RW, P1)]["node.session.auth.password"] == "gpu1-rotated-22"
    assert node.records[(v3, P2)]["node.session.auth.password"] == "gpu1-rotated-22"
    assert node.records[(v3, P2)]["node.startup"] == "manual"  # a job's record never logs in again by itself
    assert node.records[other]["node.session.auth.password"] == "theirs"  # not the fabric's
    assert sum(1 for a in node.seen if a[-1:] in (["--login"], ["--logout"])) == logins  # no session touched
    assert not any("gpu1-rotated-22" in json.dumps(a) for a in node.seen) and "rotated" not in json.dumps(out)
    assert make_agent(tmp_path, node, rotated).refresh_credentials()["changed"] is False


# ---- fabricctl through the agent: the client, the publishing service, the commands -----------------------------

class OverSSH(Runner):
    """A GPU node reached with storage1's key, whose forced command is `fabric-node --ssh --from storage1`: the argv
    is the request, served by the CLI's --ssh mode (its parser, then the agent on ``node``)."""

    STDOUT = threading.Lock()  # the fan-out asks hosts in threads; sys.stdout is one for all of them

    def __init__(self, tmp_path, node, name: str = "gpu1", initiator: str = GPU1, dry_run: bool = False):
        super().__init__(dry_run=dry_run)
        self.node, self.requests = node, []
        cfg = node_cfg(tmp_path, name, initiator)

        def make(dry: bool):
            node.dry_run = dry
            return agent_mod.Agent(cfg, node, boot_id="b", lock_path=str(tmp_path / f"{name}.lock"))

        self.make = make

    def _run(self, argv, data):
        request = shlex.join(argv)
        self.requests.append(request)
        out, err = io.StringIO(), io.StringIO()
        with self.STDOUT, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(["--ssh", "--from", "storage1"], agent=self.make, environ={ssh.ENV: request})
        return rc, out.getvalue(), err.getvalue()


def publisher(hosts: dict) -> publish.Publisher:
    return publish.Publisher(test_publishing.SETTINGS, None, lambda host: pytest.fail("a shell runner was asked for"),
                             test_publishing.HOSTS, agents=lambda host: AgentClient(hosts[host.name], host.name))


def test_the_publishing_service_attaches_and_detaches_a_jobs_exports_through_the_agent(tmp_path, lio_state):
    gpu1 = OverSSH(tmp_path, granted(RW, S100))
    pub = publisher({"gpu1": gpu1})
    writable, restore = test_publishing.SETTINGS.writable("llama", "ext4"), test_publishing.SETTINGS.restore(
        "llama", 100, "ext4")
    host = test_publishing.HOSTS[0]
    out = pub.attach(writable, host)
    assert out["mountpoint"] == "/checkpoints/llama" and gpu1.node.mounts["/checkpoints/llama"][2].startswith("rw")
    assert pub.attach(restore, host)["mountpoint"] == "/checkpoints/llama/restore/100"
    assert gpu1.requests == ["attach-writable llama --fs ext4 --json", "attach-restore llama 100 --fs ext4 --json"]
    gpu1.node.busy["/checkpoints/llama"] = ["77 trainer"]
    with pytest.raises(AgentError, match="in use by 77 trainer"):
        pub.detach(writable, host)
    assert pub.detach(writable, host, force=True)["changed"] and pub.detach(restore, host)["changed"]
    assert not gpu1.node.mounts and not gpu1.node.sessions and not gpu1.node.records
    assert gpu1.requests[-2:] == ["detach-writable llama --force --json", "detach-restore llama 100 --json"]


def test_an_agent_with_another_checkpoint_mount_root_is_named(tmp_path, lio_state):
    gpu1 = OverSSH(tmp_path, granted(RW))
    raw = vars(node_cfg(tmp_path))
    other = node_config.parse({"host": "gpu1", "initiator": GPU1, "iqn_base": BASE, "state_dir": raw["state_dir"],
                               "checkpoint_mount_root": "/ckpt", "storage_nodes": {"storage1": {"portal": P1}}},
                              {"chap": {"username": "gpu1", "password": "gpu1-s3cret-1"}})
    gpu1.make = lambda dry: agent_mod.Agent(other, gpu1.node, boot_id="b", lock_path=str(tmp_path / "l"))
    with pytest.raises(Exception, match="fabric_node_checkpoint_mount_root") as err:
        publisher({"gpu1": gpu1}).attach(test_publishing.SETTINGS.writable("llama", "ext4"), test_publishing.HOSTS[0])
    assert "/ckpt/llama" in err.value.problem


def test_a_snapshots_freeze_and_thaw_are_the_writers_agents(tmp_path, monkeypatch):
    """freeze.frozen with the writer's agent (node.client.AgentWriter): freeze, the snapshot here, thaw; the
    window counts from before the request, less what the agent spent before it set the timer (from its process's
    start, which is this test's own here: the request's start instead)."""
    monkeypatch.setattr(cli, "started", lambda: None)
    gpu1 = OverSSH(tmp_path, granted(RW))
    gpu1.make(False).checkpoints.attach("llama", storage_node="storage1", fstype="ext4")
    writer, taken = AgentWriter(AgentClient(gpu1, "gpu1"), "llama", "/checkpoints/llama"), []
    snapshot, window = freeze.frozen(writer, lambda: taken.append(set(gpu1.node.frozen)) or "snap", limit=30,
                                     discard=lambda: pytest.fail("discarded"))
    assert snapshot == "snap" and taken == [{"/checkpoints/llama"}] and 0 <= window < 30
    assert gpu1.requests == ["freeze llama --seconds 30 --json", "thaw llama --seconds 30 --json"]
    assert not gpu1.node.frozen and not gpu1.node.timers


def test_the_agent_counts_its_lead_from_its_process_start(monkeypatch):
    """What passed in the agent before it set the timer counts from its process's start (/proc/self/stat): a
    caller's request started before it, so its window less this lead still covers the timer's whole life."""
    import time

    since = cli.started()
    assert since is not None and since <= time.monotonic()


def test_a_failed_snapshot_still_thaws_through_the_agent_and_a_refused_freeze_sets_nothing(tmp_path):
    gpu1 = OverSSH(tmp_path, granted(RW))
    gpu1.make(False).checkpoints.attach("llama", storage_node="storage1", fstype="ext4")
    writer = AgentWriter(AgentClient(gpu1, "gpu1"), "llama", "/checkpoints/llama")

    def fail():
        raise RuntimeError("snapshot failed")

    with pytest.raises(RuntimeError, match="snapshot failed"):
        freeze.frozen(writer, fail, limit=30, discard=lambda: None)
    assert gpu1.requests[-1].startswith("thaw llama") and not gpu1.node.frozen and not gpu1.node.timers
    gpu1.requests.clear()
    with pytest.raises(freeze.FreezeRefused, match="not mounted read-write"):
        freeze.frozen(AgentWriter(AgentClient(gpu1, "gpu1"), "bert", "/checkpoints/bert"), fail, limit=30,
                      discard=lambda: None)
    assert gpu1.requests == ["freeze bert --seconds 30 --json"]  # nothing set there: no thaw asked for


def test_a_freeze_still_in_flight_on_the_writer_keeps_its_timer_through_the_agent(tmp_path):
    gpu1 = OverSSH(tmp_path, granted(RW))
    gpu1.make(False).checkpoints.attach("llama", storage_node="storage1", fstype="ext4")
    gpu1.node.in_flight = True  # an earlier freeze holds the lock: arming refuses, nothing of this run to thaw
    with pytest.raises(freeze.FreezeInFlight) as err:
        freeze.frozen(AgentWriter(AgentClient(gpu1, "gpu1"), "llama", "/checkpoints/llama"),
                      lambda: pytest.fail("snapshot taken"), limit=30, discard=lambda: None)
    assert ".timer" in err.value.fix and gpu1.requests == ["freeze llama --seconds 30 --json"]


@pytest.fixture
def agents(tmp_path, monkeypatch):
    """gpu1 (the writer of llama, granted its volume and restore) and gpu2 with their agents; this storage node's
    key runs only them (ssh.access: agent), and no shell runner may be asked for."""
    monkeypatch.setattr(test_publishing, "CONFIG", test_publishing.CONFIG + "ssh: {access: agent}\n")
    runners = {"gpu1": OverSSH(tmp_path, granted(RW, S100)),
               "gpu2": OverSSH(tmp_path, WriterNode(GPU2, grants={P1: {S100}}), "gpu2", GPU2)}

    def agent(self, host):  # the SSH runner in its forced mode, dry when the command is
        self.hosts.setdefault(host.name, "contacted")
        runners[host.name].dry_run = self.dry_run
        return AgentClient(runners[host.name], host.name)

    monkeypatch.setattr(context.Context, "agent", agent)
    return runners


def no_shell(monkeypatch):
    monkeypatch.setattr(context.Context, "ssh", lambda self, host: pytest.fail(f"a shell on {host.name}"))


def test_checkpoint_commands_ask_the_hosts_agents_in_a_dry_run(agents, fabricctl_node, monkeypatch, capsys):
    no_shell(monkeypatch)
    local = context.LocalRunner

    def with_a_file_system(dry_run):  # this node: llama's volume has its file system already
        runner = local(dry_run)
        runner.answers[("blkid",)] = (0, "ext4\n", "")
        return runner

    monkeypatch.setattr(context, "LocalRunner", with_a_file_system)
    read_live = lio.read_live  # test_publishing's LIO, with the device of llama's step 100

    def with_the_restores_device(*args, **kwargs):
        live = read_live(*args, **kwargs)
        live["devices"]["/dev/zvol/tank/checkpoints/llama@step-100"] = {
            "exists": True, "block": True, "realpath": "/dev/zd16"}
        return live

    for where in (lio, lio.kernel):
        monkeypatch.setattr(where, "read_live", with_the_restores_device)
    status, _ = fabricctl_node("checkpoint", "volume", "create", "llama", "--size", "1G", "--writer", "gpu1",
                               "--dry-run")
    assert status == 0, capsys.readouterr()
    capsys.readouterr()
    status, _ = fabricctl_node("checkpoint", "restore", "llama", "--step", "100", "--to", "gpu_nodes", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and {h: r["status"] for h, r in out["hosts"].items()} == {"gpu1": "ok", "gpu2": "ok"}, out
    status, _ = fabricctl_node("checkpoint", "restore", "llama", "--step", "100", "--to", "gpu2", "--remove",
                               "--dry-run")
    assert status == 0, capsys.readouterr()
    assert agents["gpu1"].requests == ["attach-writable llama --fs ext4 --json --dry-run",
                                       "attach-restore llama 100 --fs ext4 --json --dry-run"]
    assert agents["gpu2"].requests == ["attach-restore llama 100 --fs ext4 --json --dry-run",
                                       "detach-restore llama 100 --json --dry-run"]
    assert all(not r.node.mounts and not r.node.records for r in agents.values())  # dry all the way down


def test_a_checkpoint_snapshot_dry_run_asks_the_writers_agent_to_check(agents, fabricctl_node, monkeypatch, capsys):
    no_shell(monkeypatch)
    monkeypatch.setattr(lzc, "exists", lambda name: False)  # no snapshot of step 300 yet (libzfs_core is not here)
    status, _ = fabricctl_node("checkpoint", "snapshot", "llama", "--step", "300", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 1 and "gpu1" in out["error"] and "not mounted read-write" in out["error"], out
    assert "checkpoint volume create llama" in out["fix"] and "--writer gpu1" in out["fix"]
    agents["gpu1"].make(False).checkpoints.attach("llama", storage_node="storage1", fstype="ext4")
    status, _ = fabricctl_node("checkpoint", "snapshot", "llama", "--step", "300", "--dry-run")
    assert status == 0, capsys.readouterr()
    assert agents["gpu1"].requests == ["freeze llama --seconds 30 --dry-run --json"] * 2
    assert not agents["gpu1"].node.timers and not agents["gpu1"].node.frozen


def test_access_sync_asks_each_host_with_sessions_to_refresh_its_own_records(agents, fabricctl_node, monkeypatch,
                                                                            capsys):
    no_shell(monkeypatch)
    status, _ = fabricctl_node("access", "sync", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and sorted(out["hosts"]) == ["gpu1", "gpu2"], out
    assert agents["gpu1"].requests == agents["gpu2"].requests == ["refresh-credentials --json --dry-run"]


def test_status_reads_the_writers_through_their_agents(agents, fabricctl_node, monkeypatch, capsys):
    no_shell(monkeypatch)
    agents["gpu1"].make(False).checkpoints.attach("llama", storage_node="storage1", fstype="ext4")
    agents["gpu1"].make(False).checkpoints.freeze("llama", 30)
    fabricctl_node("status", "--writers")
    out = json.loads(capsys.readouterr().out)
    assert "writer-state llama --json" in agents["gpu1"].requests
    assert "/checkpoints/llama" in json.dumps(out)


# ---- the rules the verbs stand on ---------------------------------------------------------------------------

@pytest.mark.parametrize("step, ok", [(0, True), ("12000", True), (10**17, True), ("1" * 18, True), ("1" * 19, False),
                                      (-1, False), ("-1", False), ("1e3", False), ("", False), (True, False),
                                      ("１２", False), ("12\n", False), (None, False)])
def test_a_checkpoint_step_is_a_whole_number(step, ok):
    from fabric_core.base.errors import InvalidName
    from fabric_core.base.names import validate_step

    if ok:
        assert validate_step(step) == int(step)
    else:
        with pytest.raises(InvalidName, match="invalid step"):
            validate_step(step)


def test_the_agents_checkpoint_mount_root_is_its_own_directory(tmp_path):
    assert node_cfg(tmp_path).checkpoint_mount_root == "/checkpoints"
    raw = {"host": "gpu1", "initiator": GPU1, "iqn_base": BASE, "storage_nodes": {"storage1": {"portal": P1}}}
    chap = {"chap": {"username": "gpu1", "password": "gpu1-s3cret-1"}}
    assert node_config.parse(raw, chap).checkpoint_mount_root == "/checkpoints"  # fabricctl's default
    for bad in ("/datasets", "/etc", "relative", "/a/../b"):
        with pytest.raises(Exception, match="checkpoint_mount_root|system directory|absolute"):
            node_config.parse({**raw, "checkpoint_mount_root": bad}, chap)


def test_a_shell_keys_refresh_rewrites_the_records_secret_and_nothing_else(lio_state):
    """ssh.access shell (before the agent): access sync's refresh writes the host's secret from fabricctl's
    configuration into the records of its sessions (iscsi.refresh_record, from stdin), keeping their startup; it
    never logs in."""
    node = WriterNode(GPU1, grants={P1: {RW}})
    node.records[(RW, P1)] = {"node.startup": "manual", "node.session.auth.password": "old"}
    pub = publish.Publisher(test_publishing.SETTINGS, None, lambda host: node, test_publishing.HOSTS)
    out = pub.refresh(test_publishing.HOSTS[0], [RW])
    assert out["changed"] and node.records[(RW, P1)]["node.session.auth.password"] == "gpu1-s3cret-1"
    assert node.records[(RW, P1)]["node.startup"] == "manual" and not node.sessions
    assert not any("gpu1-s3cret-1" in json.dumps(a) for a in node.seen + out["commands"])


def test_a_writer_with_many_jobs_is_asked_in_requests_that_fit(tmp_path):
    """`status --writers` on a writer of 100 jobs with 30-character names: several writer-state requests, each
    within the forced command's 512 characters, merged into one answer."""
    gpu1 = OverSSH(tmp_path, granted(RW))
    jobs = [f"job-{n:03d}-" + "x" * 22 for n in range(100)]
    res = AgentClient(gpu1, "gpu1").writer_state(jobs)
    assert len(gpu1.requests) > 1 and all(len(r) <= ssh.MAX_REQUEST for r in gpu1.requests)
    assert sorted(res["jobs"]) == sorted(jobs) and res["frozen"] == {} and res["blocked"] == []
