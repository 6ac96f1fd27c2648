"""fabricctl where its key on the GPU nodes runs only the node agent (ssh.access: agent): publish, unpublish,
verify --on and list --holders ask `fabric-node --ssh` (node.client.AgentClient); every request goes through the
forced command's parser (fabric_node.ssh) into the agent on a simulated GPU node (node_fake.FakeNode); nothing
else runs on a host. With ssh.access none (pull only), publish grants and contacts no host."""

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
from fabric_core.node.client import AgentClient, AgentError
from node_fake import FakeNode
from support import FCTL_IQN_BASE, GPU1, GPU2, AnsweringRunner

from fabric_node import main as cli
from fabricctl import context

BASE = FCTL_IQN_BASE
P1 = "10.77.0.11:3260"
fabricctl_node, lio_state = test_publishing.fabricctl_node, test_publishing.lio_state  # its fixtures, used here


class AgentOverSSH(Runner):
    """A GPU node reached with a key whose forced command is `fabric-node --ssh`: the argv is the request, served
    by the CLI's --ssh mode (its parser, then the agent on ``node``)."""

    def __init__(self, tmp_path, node: FakeNode, name: str, initiator: str, dry_run: bool = False):
        super().__init__(dry_run=dry_run)
        self.node, self.requests = node, []
        raw = {"host": name, "initiator": initiator, "iqn_base": BASE, "mount_root": "/datasets",
               "storage_nodes": {"storage1": {"portal": P1}}, "state_dir": str(tmp_path / name)}
        chap = {"username": name, "password": f"{name}-s3cret-1"}
        cfg = node_config.parse(raw, {"chap": chap})

        def make(dry: bool):
            node.dry_run = dry
            return agent_mod.Agent(cfg, node, boot_id="b", lock_path=str(tmp_path / f"{name}.lock"))

        self.make = make

    STDOUT = threading.Lock()  # the fan-out asks hosts in threads; sys.stdout is one for all of them

    def _run(self, argv, data):
        request = shlex.join(argv)
        self.requests.append(request)
        out, err = io.StringIO(), io.StringIO()
        with self.STDOUT, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(["--ssh"], agent=self.make, environ={"SSH_ORIGINAL_COMMAND": request})
        return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def agents(tmp_path, monkeypatch):
    """gpu1 and gpu2 with their agents; this storage node's key runs only them (ssh.access: agent)."""
    monkeypatch.setattr(test_publishing, "CONFIG", test_publishing.CONFIG + "ssh: {access: agent}\n")
    nodes = {"gpu1": FakeNode(GPU1, grants={P1: {f"{BASE}:ds.imagenet.v1", f"{BASE}:ds.imagenet.v2"}}),
             "gpu2": FakeNode(GPU2, grants={P1: {f"{BASE}:ds.imagenet.v1"}})}
    runners = {h: AgentOverSSH(tmp_path, n, h, {"gpu1": GPU1, "gpu2": GPU2}[h]) for h, n in nodes.items()}
    def agent(self, host):  # the SSH runner in its forced mode, dry when the command is
        self.hosts.setdefault(host.name, "contacted")
        runners[host.name].dry_run = self.dry_run
        return AgentClient(runners[host.name], host.name)

    monkeypatch.setattr(context.Context, "agent", agent)
    return runners


def test_publish_asks_each_hosts_agent_and_runs_nothing_else_there(agents, fabricctl_node, capsys):
    status, shells = fabricctl_node("publish", "imagenet@v2", "--to", "gpu1", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0, out
    # v2 is the dataset's newest version: the attach itself moves the current link (one request to the host)
    assert agents["gpu1"].requests == ["attach imagenet@v2 --holder manual --current --json --dry-run"]
    result = out["hosts"]["gpu1"]["result"]
    assert result["holders"] == ["manual"] and result["mountpoint"] == "/datasets/imagenet/v2"
    assert result["current"] == "v2" and result["switched"] is True
    assert shells["gpu1"].seen == []  # the shell runner was never used
    assert agents["gpu1"].node.executed == [] and not agents["gpu1"].node.mounts  # a dry run all the way down


def test_publish_of_an_older_version_reads_the_link_and_leaves_a_newer_one(agents, fabricctl_node, capsys):
    """v1 is not the newest: the attach only reads the link; `current` stays on v2, which the host has."""
    make = agents["gpu1"].make
    make(False).attach("imagenet@v2", "manual", current=True)
    status, _shells = fabricctl_node("publish", "imagenet@v1", "--to", "gpu1", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0, out
    assert agents["gpu1"].requests == ["attach imagenet@v1 --holder manual --json --dry-run"]
    result = out["hosts"]["gpu1"]["result"]
    assert result["current"] == "v2" and result["switched"] is False


def test_publish_to_an_agent_older_than_current_asks_the_old_way(agents, fabricctl_node, monkeypatch, capsys):
    """An agent that refuses --current (installed before it): the attach again without it, then `current`."""
    from fabric_node import ssh

    monkeypatch.setitem(ssh.FLAGS, "attach", ("--json", "--dry-run"))
    status, _shells = fabricctl_node("publish", "imagenet@v2", "--to", "gpu1", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0, out
    assert agents["gpu1"].requests == ["attach imagenet@v2 --holder manual --current --json --dry-run",
                                       "attach imagenet@v2 --holder manual --json --dry-run",
                                       "current imagenet v2 --json --dry-run"]
    result = out["hosts"]["gpu1"]["result"]
    assert result["current"] == "v2" and result["switched"] is True


def test_a_real_publish_then_unpublish_through_the_agent(agents, fabricctl_node, monkeypatch, capsys):
    """The host side for real (the storage side stays a dry run: the fixture's node plans LIO and ZFS)."""
    client = AgentClient(agents["gpu1"], "gpu1")
    out = client.attach("imagenet@v1")
    assert out["holders"] == ["manual"] and agents["gpu1"].node.mounts
    assert out["current"] is None  # no current link yet
    assert client.in_use("imagenet@v1") == []
    assert client.current("imagenet", "v1")["switched"] and client.current("imagenet")["current"] == "v1"
    assert client.attach("imagenet@v1")["current"] == "v1"  # an attach answers with the link's version
    del agents["gpu1"].requests[:]
    status, _shells = fabricctl_node("publish", "imagenet@v1", "--to", "gpu1", "--dry-run")
    capsys.readouterr()
    # the version is current there already: the attach is the publish's one request to the host
    assert status == 0 and agents["gpu1"].requests == ["attach imagenet@v1 --holder manual --json --dry-run"]
    agents["gpu1"].dry_run = False  # the publish's dry run set it
    with pytest.raises(AgentError) as err:
        client.attach("imagenet@v3")
    assert err.value.reason == "not_granted" and "fabricctl grant imagenet@v3 --to gpu1" in err.value.fix
    out = client.detach("imagenet@v1")
    assert out["detached"] and not agents["gpu1"].node.mounts and not agents["gpu1"].node.sessions


def test_unpublish_refuses_a_version_a_job_holds_on_the_host(agents, fabricctl_node, capsys):
    make = agents["gpu1"].make
    make(False).attach("imagenet@v1", "job:77")  # a scheduler's job reads it on gpu1
    status, _ = fabricctl_node("unpublish", "imagenet@v1", "--from", "gpu1", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 1 and "held by job:77" in out["error"]
    assert agents["gpu1"].requests == ["in-use imagenet@v1 --json"]


def test_list_holders_asks_the_agents(agents, fabricctl_node, capsys):
    agents["gpu1"].make(False).attach("imagenet@v1", "job:5")
    status, _ = fabricctl_node("list", "--holders")
    listing = json.loads(capsys.readouterr().out)
    assert status == 0 and "datasets" in listing, listing
    (dataset,) = listing["datasets"]
    v1 = next(v for v in dataset["versions"] if v["version"] == "v1")
    assert v1["holders"] == {"gpu1": ["job:5"], "gpu2": []} or v1["holders"] == {"gpu1": ["job:5"]}
    assert "attached" in v1


@pytest.mark.parametrize("access, said", [("agent", "runs only the node agent"), ("none", "pull only")])
def test_commands_that_run_commands_on_a_host_are_refused_unless_the_key_may(tmp_path, access, said):
    """A shell runner on a GPU node is refused with the agent-only key and with none, naming why (every command asks
    the agent then: tests/unit/test_agent_checkpoints.py); with shell it gets its runner."""
    import argparse

    from fabric_core.base.errors import UserError

    for mode in (access, "shell"):
        path = tmp_path / f"{mode}.yml"
        path.write_text(test_publishing.CONFIG + f"ssh: {{access: {mode}}}\n")
        ctx = context.Context(argparse.Namespace(config=str(path), dry_run=True, json=True))
        host = ctx.config.hosts["gpu2"]
        if mode == "shell":
            assert ctx.ssh(host).forced is False and ctx.agent(host) is None
            continue
        with pytest.raises(UserError, match=said) as err:
            ctx.ssh(host)
        assert "fabric-node --ssh" in err.value.fix and "checkpoints need agent" in err.value.fix
        assert (ctx.agent(host) is not None) == (access == "agent")


@pytest.fixture
def pull_only(monkeypatch):
    monkeypatch.setattr(test_publishing, "CONFIG", test_publishing.CONFIG + "ssh: {access: none}\n")


def test_pull_only_publish_grants_and_contacts_no_host(pull_only, fabricctl_node, monkeypatch, capsys):
    monkeypatch.setattr(context.Context, "agent", lambda self, host: pytest.fail("a host was contacted"))
    status, shells = fabricctl_node("publish", "imagenet@v2", "--to", "gpu_nodes", "--dry-run")
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["pull_only"] is True and out["hosts"] == {"gpu1": {"status": "granted"},
                                                                         "gpu2": {"status": "granted"}}
    assert all(h.seen == [] for h in shells.values())


def test_the_agent_clients_errors_are_the_agents_own():
    def node(rc, out):
        return AnsweringRunner({(): (rc, out, "")})

    with pytest.raises(AgentError) as err:
        AgentClient(node(1, json.dumps({"problem": "p", "fix": "f", "exit": 1, "reason": "not_granted"})),
                    "gpu1").attach("imagenet@v1")
    assert (err.value.problem, err.value.fix, err.value.exit_code, err.value.reason) == ("p", "f", 1,
                                                                                        "not_granted")
    with pytest.raises(AgentError, match="did not answer") as err:
        AgentClient(node(127, ""), "gpu1").list()
    assert err.value.exit_code == 5
    dry = AnsweringRunner({(): (0, "{}", "")}, dry_run=True)
    AgentClient(dry).detach("imagenet@v1", force=True)
    AgentClient(dry).list()
    assert dry.seen == [("detach", "imagenet@v1", "--holder", "manual", "--force", "--json", "--dry-run"),
                        ("list", "--json")]


def test_a_publish_whose_host_reads_around_this_storage_node_says_so():
    """CI's test_reboot: storage2 published to gpu1, whose agent did not list storage2, and gpu1 kept reading through
    storage1 alone; the publish now says so and names the fix. One path (no multipathd) or an older agent: no check."""
    from types import SimpleNamespace

    from fabric_core.base.errors import UserError
    from fabric_core.services import publish as svc

    host = SimpleNamespace(name="gpu1")
    export = SimpleNamespace(ref="shared@v1")
    answer = {"multipath": "3600140", "storage_nodes": ["storage1"], "portals": ["10.77.0.11:3260"]}
    with pytest.raises(UserError) as err:
        svc._through_here(host, export, answer, "10.77.0.12:3260")
    assert "through storage1 only, not through this storage node (10.77.0.12:3260)" in err.value.problem
    assert "playbooks/gpu.yml --tags agent" in err.value.fix
    svc._through_here(host, export, {**answer, "portals": ["10.77.0.11:3260", "10.77.0.12:3260"]}, "10.77.0.12:3260")
    svc._through_here(host, export, {**answer, "multipath": None}, "10.77.0.12:3260")
    svc._through_here(host, export, {k: v for k, v in answer.items() if k != "portals"}, "10.77.0.12:3260")
