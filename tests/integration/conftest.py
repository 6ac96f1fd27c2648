"""Integration tests run against the lab VMs: real ZFS, real LIO, real iSCSI sessions.

The lab boots once per test run (session fixture `lab`) and is shared by every test. A run
starts from freshly booted VMs: a lab that is already up is stopped and booted again, because
tests assume blank disks (set FABRIC_LAB_REUSE=1 to reuse it as it is while developing). The run
stops the lab at the end (set FABRIC_LAB_KEEP=1 to keep it).
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import testinfra

REPO = Path(__file__).resolve().parents[2]
LABCTL = [sys.executable, str(REPO / "lab" / "labctl.py")]


def run(argv, **kw) -> subprocess.CompletedProcess:
    """subprocess.run with a stdin of its own.

    The ssh processes of testinfra and of the lab's connection sharing set O_NONBLOCK on the stdin
    they inherit; when that is CI's /dev/null, every later process sharing it sees a non-blocking
    stdin, and ansible-core refuses to start ("Ansible requires blocking IO"). A fresh /dev/null
    per command avoids that.
    """
    return subprocess.run(argv, stdin=subprocess.DEVNULL, **kw)


@dataclass
class LabInfo:
    ssh_config: Path
    inventory: Path
    vms: dict  # name -> {"address": ..., "role": ..., "disks": [...]}

    def addr(self, name: str) -> str:
        return self.vms[name]["address"]

    def names(self, role: str) -> list[str]:
        return [n for n, v in self.vms.items() if v["role"] == role]


def _status() -> dict:
    proc = run([*LABCTL, "status", "--json"], capture_output=True, text=True)
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def lab() -> LabInfo:
    if os.geteuid() != 0:
        pytest.fail("integration tests need root: they boot the lab (network namespace, taps, VMs). "
                    "Run `make test` as root.", pytrace=False)
    status = _status()
    if not (status["up"] and os.environ.get("FABRIC_LAB_REUSE")):
        if status["netns_present"]:
            run([*LABCTL, "down"], check=True)
        proc = run([*LABCTL, "up"])
        if proc.returncode != 0:
            pytest.fail(f"`labctl up` failed (exit {proc.returncode}); see its output above", pytrace=False)
        status = _status()
        assert status["up"], f"lab did not come up: {status}"
    state = Path(status["state_dir"])
    info = LabInfo(ssh_config=state / "ssh_config", inventory=REPO / "inventory" / "lab" / "hosts.yml",
                   vms={v["name"]: v for v in status["vms"]})
    yield info
    if not os.environ.get("FABRIC_LAB_KEEP"):
        run([*LABCTL, "down"])


@pytest.fixture(scope="session")
def hosts(lab):
    """hosts["storage1"] etc.: testinfra hosts over SSH through the lab namespace."""
    return {name: testinfra.get_host(f"ssh://{name}", ssh_config=str(lab.ssh_config)) for name in lab.vms}


@pytest.fixture
def uid() -> str:
    """A short unique suffix so that names made by one test never collide with another's."""
    return uuid.uuid4().hex[:6]


def run_python(host, script: str, *args: str):
    """Run a Python script on a lab VM (it arrives base64-encoded; args are passed as argv)."""
    b64 = base64.b64encode(script.encode()).decode()
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in args)
    path = f"/tmp/.fabric-test-{uuid.uuid4().hex[:8]}.py"
    return host.run(f"echo {b64} | base64 -d > {path} && python3 {path} {quoted}; rc=$?; rm -f {path}; exit $rc")


# Export a zvol read-only over iSCSI with raw rtslib-fb, independently of the project's own LIO code
# (test_lab.py, test_iscsi_initiator.py). argv[1] is JSON: name, dev, iqn, portal, initiator and
# optionally chap {username, password}: one LUN, mapped write-protected to that one initiator's ACL.
EXPORT = r'''
import json, sys, time
from rtslib_fb import (BlockStorageObject, FabricModule, LUN, MappedLUN, NetworkPortal, NodeACL, Target, TPG)
p = json.loads(sys.argv[1])
for attempt in range(30):  # right after umount, udev's probe may still hold the zvol open
    try:
        so = BlockStorageObject(p["name"], dev=p["dev"], readonly=True)
        break
    except Exception:
        if attempt == 29:
            raise
        time.sleep(1)
target = Target(FabricModule("iscsi"), p["iqn"])
tpg = TPG(target, 1)
chap = p.get("chap")
tpg.set_attribute("authentication", "1" if chap else "0")
tpg.set_attribute("generate_node_acls", "0")
tpg.set_attribute("demo_mode_write_protect", "1")
NetworkPortal(tpg, p["portal"], 3260)
lun = LUN(tpg, 0, so)
acl = NodeACL(tpg, p["initiator"])
MappedLUN(acl, 0, lun, write_protect=True)
if chap:
    acl.chap_userid = chap["username"]
    acl.chap_password = chap["password"]
tpg.enable = True
'''


def step(msg: str) -> None:
    """A progress line (shown with `pytest -s`, as `make demo` does)."""
    print(f"  -> {msg}", flush=True)


@dataclass
class PlaybookRun:
    rc: int
    stdout: str
    stderr: str
    recap: dict  # host -> {"ok": n, "changed": n, "failed": n, ...}

    def changed(self) -> dict:
        return {host: counts["changed"] for host, counts in self.recap.items()}

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def parse_recap(stdout: str) -> dict:
    """PLAY RECAP lines (`host : ok=3 changed=1 ...`) as {host: {counter: int}}."""
    recap = {}
    in_recap = False
    for line in stdout.splitlines():
        if line.startswith("PLAY RECAP"):
            in_recap = True
            continue
        if in_recap and " : " in line:
            host, _, counters = line.partition(" : ")
            recap[host.strip()] = {k: int(v) for k, v in (c.split("=") for c in counters.split())}
    return recap


def ansible_playbook(lab: LabInfo, playbook: str, *args: str, extra_vars: dict | None = None,
                     timeout: float = 1800, gather_facts: bool = True) -> PlaybookRun:
    """Run ansible-playbook from the repository root against the lab inventory.

    gather_facts=False skips the implicit fact gathering (for runs whose tasks need no facts,
    such as preflight refusals): under emulation it is the slowest part of a short run.
    """
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(lab.inventory), playbook, *args]
    if extra_vars is not None:
        argv += ["-e", json.dumps(extra_vars)]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_CALLBACK_RESULT_FORMAT="yaml")
    if not gather_facts:
        env["ANSIBLE_GATHERING"] = "explicit"
    proc = run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    return PlaybookRun(proc.returncode, proc.stdout, proc.stderr, parse_recap(proc.stdout))


# Test modules that change the fabric run in this order (pytest would take them alphabetically):
# the lab itself, single modules, the whole site, fabricctl on the converged site, and the reboot last.
MODULE_ORDER = ["test_lab.py", "test_lab_lifecycle.py", "test_lio_target.py", "test_iscsi_initiator.py",
                "test_site.py", "test_fabricctl.py", "test_checkpoints.py", "test_reboot.py"]


def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        name = Path(str(item.fspath)).name
        return MODULE_ORDER.index(name) if name in MODULE_ORDER else len(MODULE_ORDER)

    items.sort(key=rank)  # stable: the order inside a module is kept


MOLECULE = Path(sys.executable).parent / "molecule"


@pytest.fixture(scope="session")
def converged(lab):
    """The fabric converged once per run by Molecule's default scenario: syntax, check on the fresh
    lab, converge, idempotence, verify.

    Molecule's idempotence step runs site.yml a second time and fails unless it reports changed=0
    on every host.

    While developing against a lab already converged (FABRIC_LAB_REUSE=1), FABRIC_SITE_CONVERGED=1
    skips the Molecule run; test_site.py's Molecule assertions then fail, so never set it in CI.
    """
    if os.environ.get("FABRIC_LAB_REUSE") and os.environ.get("FABRIC_SITE_CONVERGED"):
        step("FABRIC_SITE_CONVERGED=1: using the lab as converged, Molecule not run")
        return ""
    step("molecule test -s default (syntax, check, converge, idempotence, verify)")
    started = time.monotonic()
    # molecule runs ansible-config and ansible-playbook by name: the virtualenv's bin goes first on PATH
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", PY_COLORS="0",
               PATH=f"{MOLECULE.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = run([str(MOLECULE), "test", "-s", "default"], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=3600)
    elapsed = time.monotonic() - started
    tail = f"{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"molecule failed (exit {proc.returncode}):\n{tail}"
    step(f"molecule sequence passed in {elapsed:.0f} s")
    return proc.stdout + proc.stderr


# ---- fabricctl on storage1 (test_fabricctl.py, test_checkpoints.py) ------------------------------

class Fctl:
    """`fabricctl ARGS` on a lab VM, under a timeout so that a hung command fails the test."""

    def __init__(self, host):
        self.host = host

    def __call__(self, *args: str, env: str = "", timeout: int = 900):
        cmd = f"{env} timeout {timeout} fabricctl " + " ".join(shlex.quote(a) for a in args)
        return self.host.run(cmd.strip())

    def json(self, *args: str, env: str = ""):
        res = self(*args, "--json", env=env)
        assert res.rc == 0, f"fabricctl {' '.join(args)} failed ({res.rc}): {res.stderr}"
        return json.loads(res.stdout)


@pytest.fixture(scope="module")
def storage(hosts, converged):
    """storage1 of the converged fabric (fabricctl is installed there)."""
    return hosts["storage1"]


@pytest.fixture(scope="module")
def fctl(storage):
    """fabricctl on storage1: fctl(*args) for the raw result, fctl.json(*args) for a parsed success."""
    return Fctl(storage)


EDIT_CONFIG = """
import sys, yaml
c = yaml.safe_load(open("/etc/fabricctl/config.yml"))
exec(sys.argv[2])
yaml.safe_dump(c, open(sys.argv[1], "w"))
"""


def edited_config(storage, path: str, change: str) -> str:
    """A copy of fabricctl's config at path with `change` (Python on `c`) applied; returns the env to use it."""
    run_python(storage, EDIT_CONFIG, path, change).stdout  # noqa: B018
    assert storage.run(f"test -s {path}").rc == 0
    return f"FABRICCTL_CONFIG={path}"


def assert_refused_and_nothing_changed(storage, fctl: Fctl, args: list[str], words: list[str]) -> None:
    """Bad input: fabricctl exits 1 with the words and a `fix:` line, and no ZFS object appears or goes."""
    before = storage.check_output("zfs list -H -t all -o name -r tank | sort | md5sum")
    res = fctl(*args)
    assert res.rc == 1, f"exit {res.rc}: {res.stdout} {res.stderr}"
    for word in words:
        assert word in res.stderr
    assert "fix:" in res.stderr
    assert storage.check_output("zfs list -H -t all -o name -r tank | sort | md5sum") == before
