"""Integration tests run against the lab VMs: real ZFS, real LIO, real iSCSI sessions.

The lab boots once per test run (session fixture `lab`) and is shared by every test. A run
starts from freshly booted VMs: a lab that is already up is stopped and booted again, because
tests assume blank disks (set FABRIC_LAB_REUSE=1 to reuse it as it is while developing). The run
stops the lab at the end (set FABRIC_LAB_KEEP=1 to keep it).

Every test file is independent: it asks for the lab state it needs through fixtures that build
that state when it is missing and reuse it when it is there (`converged`: the site converged, with
the record of its four runs; `published`: a dataset version published to the GPU nodes; `storage2`:
the second storage node booted and converged). Any file runs alone, and the files run in any order
(`--shuffle-files SEED`, or FABRIC_TEST_SHUFFLE=SEED, shuffles them; the order is printed).
"""

from __future__ import annotations

import base64
import json
import os
import random
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
sys.path.insert(0, str(REPO / "lab"))
from fabric_lab.lab import console_panicked, use_lab_vault  # noqa: E402 - the lab's own test of a console

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sharding import parse_shard, shard_of  # noqa: E402 - beside this file

use_lab_vault()  # every ansible-playbook, ansible and molecule run of the tests opens the lab's vault (not ansible.cfg)


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
        # a fresh lab of the release asked for (FABRIC_LAB_DEBIAN, `make test DEBIAN=12`), else of the release
        # the lab that was up ran (`make lab-up DEBIAN=12 && make test`), else Debian 13
        release = os.environ.get("FABRIC_LAB_DEBIAN") or (status.get("release") if status["netns_present"] else "")
        if status["netns_present"]:
            run([*LABCTL, "down"], check=True)
        env = dict(os.environ, FABRIC_LAB_DEBIAN=release) if release else None
        proc = run([*LABCTL, "up"], env=env)
        if proc.returncode != 0:
            pytest.fail(f"`labctl up` failed (exit {proc.returncode}); see its output above", pytrace=False)
        status = _status()
        assert status["up"], f"lab did not come up: {status}"
    state = Path(status["state_dir"])
    info = LabInfo(ssh_config=state / "ssh_config", inventory=REPO / "inventory" / "lab" / "hosts.yml",
                   vms={v["name"]: v for v in status["vms"]})
    yield info
    _PANICS.update(guest_panics(state))
    if not os.environ.get("FABRIC_LAB_KEEP"):
        run([*LABCTL, "down"])


_PANICS: dict = {}  # VM -> the end of its serial console, for each guest whose kernel panicked during the run


def guest_panics(state: Path) -> dict:
    """The lab's guests whose kernel panicked (their serial console says so), with the console's last 60 lines:
    a VM that stops answering mid-run is named with its kernel's last words in the run's summary."""
    return {console.parent.name: "\n".join(console.read_text(errors="replace").splitlines()[-60:])
            for console in sorted(state.glob("vms/*/console.log")) if console_panicked(console)}


@pytest.fixture(scope="session")
def hosts(lab):
    """hosts["storage1"] etc.: testinfra hosts over SSH through the lab namespace."""
    return {name: testinfra.get_host(f"ssh://{name}", ssh_config=str(lab.ssh_config)) for name in lab.vms}


@pytest.fixture
def uid() -> str:
    """A short unique suffix so that names made by one test never collide with another's."""
    return uuid.uuid4().hex[:6]


# The interpreter of the virtualenv the installed fabricctl command runs in (fabric_core importable), as shell
# words for a command line on a storage node.
FABRICCTL_PYTHON = '"$(head -n1 "$(command -v fabricctl)" | cut -c3-)"'


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


def wait_for(host, command: str, seconds: float, interval: float = 0.5) -> bool:
    """Whether ``command`` succeeds on ``host`` within ``seconds`` (tried every ``interval``, once more at the end)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if host.run(command).rc == 0:
            return True
        time.sleep(interval)
    return host.run(command).rc == 0


_SESSION_START = time.monotonic()


def step(msg: str) -> None:
    """A progress line (shown with `pytest -s`, as `make demo` does), with the seconds since the run began."""
    print(f"  -> [{time.monotonic() - _SESSION_START:6.0f} s] {msg}", flush=True)


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

    def failure(self, tail: int = 6000) -> str:
        """What a failed run says, for an assertion's message: every task failure's own lines (a free play's
        first failure may be thousands of lines before the end, where the other hosts' consequences are), then
        the output's tail."""
        lines = self.output.splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith(("fatal: [", "failed: [", "[ERROR]:"))]
        blocks = ["\n".join(lines[i:i + 30]) for i in starts[:6]]
        return ("\n...\n".join(blocks) + "\n\n--- the output's end ---\n" if blocks else "") + self.output[-tail:]


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


# The suite runs Ansible through Mitogen, the site's opt-in (ansible.cfg): a converged site run takes a fraction of
# the time of ansible-core's own strategies, which are the default; test_site runs the default path
# (ansible_playbook(..., default_strategy=True)) and `make demo` runs it whole.
os.environ.setdefault("ANSIBLE_STRATEGY", "fabric_linear")


def ansible_playbook(lab: LabInfo, playbook: str, *args: str, extra_vars: dict | None = None,
                     timeout: float = 1800, gather_facts: bool = True, env: dict | None = None,
                     default_strategy: bool = False) -> PlaybookRun:
    """Run ansible-playbook from the repository root against the lab inventory.

    gather_facts=False skips the implicit fact gathering (for runs whose tasks need no facts,
    such as preflight refusals): under emulation it is the slowest part of a short run.
    default_strategy: with ansible-core's own strategies, as a site that did not opt in to Mitogen runs.
    """
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(lab.inventory), playbook, *args]
    if extra_vars is not None:
        argv += ["-e", json.dumps(extra_vars)]
    environ = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_CALLBACK_RESULT_FORMAT="yaml",
                   **(env or {}))
    if not gather_facts:
        environ["ANSIBLE_GATHERING"] = "explicit"
    if default_strategy:
        environ.pop("ANSIBLE_STRATEGY", None)
    proc = run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=environ)
    return PlaybookRun(proc.returncode, proc.stdout, proc.stderr, parse_recap(proc.stdout))


def pytest_addoption(parser):
    parser.addoption("--shuffle-files", metavar="SEED", default=os.environ.get("FABRIC_TEST_SHUFFLE"),
                     help="run the test files in an order shuffled with SEED (tests inside a file keep theirs); "
                          "also FABRIC_TEST_SHUFFLE")


# ---- shards: tests/run-shards runs the files as N pytest runs at once, each on a lab of its own (sharding.py) ----


def pytest_collection_modifyitems(session, config, items):
    """Files in the order of their names, or shuffled with a seed: no file may depend on another. With
    FABRIC_TEST_SHARD=K/N, only the files of shard K (``shard_of``)."""
    files: dict = {}
    for item in items:
        files.setdefault(Path(str(item.fspath)).name, []).append(item)
    try:
        shard = parse_shard(os.environ.get("FABRIC_TEST_SHARD"))
    except ValueError as err:
        raise pytest.UsageError(str(err)) from None
    if shard is not None:
        mine = {name for name, k in shard_of(files, shard[1]).items() if k == shard[0]}
        deselected = [item for name in sorted(files) if name not in mine for item in files[name]]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        files = {name: tests for name, tests in files.items() if name in mine}
        config._fabric_shard = (shard, sorted(mine))
    order = sorted(files)
    seed = config.getoption("--shuffle-files")
    if seed not in (None, ""):
        random.Random(str(seed)).shuffle(order)
        config._fabric_file_order = (seed, order)
    items[:] = [item for name in order for item in files[name]]


# Test files kept out of `make test`, each named with why in every run's header and in docs/testing.md.
# UNPROVEN: not yet passed whole on the lab (a file that has never run would more likely fail CI for a fault of its
# own fixtures than find a fault of the fabric); FABRIC_TEST_UNPROVEN=1 collects them.
# OVER_BUDGET: passed whole on the lab, but CI's run would go past its 90-minute limit with them (issue 27: the suite
# took 4,396 s of CI's 5,400 at a69ecd3 without them); FABRIC_TEST_ALL=1 collects them (and the unproven ones).
UNPROVEN: dict[str, str] = {}
OVER_BUDGET = {
    "test_agent.py": "issue 29's node agent: its 10 tests passed on a fresh lab on 2026-11-28 (90ee3c3) in about 21 "
                     "min, storage2's boot included; CI's 90 minutes have no room for it yet (issue 27)",
    # two roles tested alone, each also converged by every site run of the suite (Molecule's sequence: check,
    # converge, idempotence, check, verify) and attacked by test_security*.py; CI at b320ca3 was stopped at its
    # 5,400 s limit in the suite's last test, and these two are about 8 minutes of it
    "test_iscsi_initiator.py": "the iscsi_initiator role alone on gpu1 (its purge of unlisted mounts, an xfs export, "
                               "a wrong CHAP secret, an invalid IQN in preflight): passed on 2026-11-27 (3 tests, "
                               "about 5 min); the site converges the role on both GPU nodes in every run (issue 27)",
    "test_lio_target.py": "the fabric_lio_target module alone on a scratch pool (check mode, purge, refusals): "
                          "passed on 2026-11-27 at 0642de5 (about 2.5 min); the site converges it on both storage "
                          "nodes in every run (issue 27)",
    # CI at dda851e was stopped at its 5,400 s limit again, in test_site.py (87% of the tests, every one passed so
    # far): these five are about 28 of the suite's minutes on this machine kind (docs/testing.md); test_reboot.py
    # still replicates a version to storage2 and reads it over both storage nodes' paths through storage1's reboot
    "test_replication.py": "replication's details (incremental, resume after SIGKILL and a dropped link, divergence, "
                           "a replica changed by hand, checkpoints) and the peer key's attacks: its 15 tests passed "
                           "in CI's run at dda851e (about 13 min); test_reboot.py replicates and reads over both "
                           "storage nodes (issue 27)",
    "test_versions.py": "issue 31's provenance, tags, incremental seal, log/show/diff: its 11 tests passed on a "
                        "clean clone's lab on 2026-11-27 (a668e58, about 6.5 min) (issue 27)",
    "test_packaging.py": "the fabricctl role's upgrade (rotation switched to cron, metrics off), removal and "
                         "reinstall of its pip package: its 3 tests passed on the lab on 2026-11-28 (8d60f31, about "
                         "5 min) (issue 27)",
    "test_lab_lifecycle.py": "the lab's own lifecycle (Ansible through the generated inventory, lab up refusals, a "
                             "half-up lab converged): its 4 tests passed in CI's run at dda851e (about 2 min) "
                             "(issue 27)",
    "test_read_bench.py": "bench-read's NFS baseline is read-only for one host and removed afterwards: passed in "
                          "CI's run at dda851e (about 1.5 min) (issue 27)",
}
_ALL = bool(os.environ.get("FABRIC_TEST_ALL"))
collect_ignore = sorted(({} if _ALL or os.environ.get("FABRIC_TEST_UNPROVEN") else UNPROVEN).keys()
                        | ({} if _ALL else OVER_BUDGET).keys())


def pytest_report_header(config):
    seed = config.getoption("--shuffle-files")
    lines = [f"test files shuffled with seed {seed}"] if seed not in (None, "") else []
    lines += [f"NOT COLLECTED: {name} ({why}; FABRIC_TEST_UNPROVEN=1 runs it)"
              for name, why in sorted(UNPROVEN.items()) if name in collect_ignore]
    lines += [f"NOT COLLECTED: {name} ({why}; FABRIC_TEST_ALL=1 runs it)"
              for name, why in sorted(OVER_BUDGET.items()) if name in collect_ignore]
    return lines or None


def pytest_collection_finish(session):
    sharded = getattr(session.config, "_fabric_shard", None)
    if sharded:
        (k, n), mine = sharded
        print(f"\nshard {k}/{n} (FABRIC_TEST_SHARD): {' '.join(mine) or 'no file'}", flush=True)
    shuffled = getattr(session.config, "_fabric_file_order", None)
    if shuffled:
        print(f"\nfile order (seed {shuffled[0]}): {' '.join(shuffled[1])}", flush=True)


_FILE_SECONDS: dict = {}
_TEST_SECONDS: dict = {}  # each test's set-up (its fixtures), added to its call's seconds in -v's line


def pytest_runtest_logreport(report):
    """Seconds per test file (setup, call and teardown of its tests, fixtures that build lab state included)."""
    name = Path(report.nodeid.split("::", 1)[0]).name
    _FILE_SECONDS[name] = _FILE_SECONDS.get(name, 0.0) + report.duration
    if report.when == "setup":
        _TEST_SECONDS[report.nodeid] = report.duration


def pytest_report_teststatus(report, config):
    """`-v`'s word for a test carries its seconds (set-up included) and the run's clock: a run that CI stops at
    its time limit still shows where the minutes went (its summary, with --durations, is never printed)."""
    if report.when != "call" or not config.getoption("verbose") or report.skipped or hasattr(report, "wasxfail"):
        return None  # pytest's own words for skips and xfails
    seconds = _TEST_SECONDS.get(report.nodeid, 0.0) + report.duration
    clock = time.monotonic() - _SESSION_START
    return report.outcome, "." if report.passed else "F", (
        f"{report.outcome.upper()} ({seconds:.0f} s, at {clock:.0f} s)", {"green" if report.passed else "red": True})


def pytest_terminal_summary(terminalreporter):
    """The time of each file in the order run (docs/testing.md's timings table is made from it), and the
    consoles of guests whose kernel panicked."""
    for name, tail in _PANICS.items():
        terminalreporter.section(f"{name}: its kernel panicked during the run (the end of its serial console)")
        terminalreporter.write_line(tail)
    if _FILE_SECONDS:
        terminalreporter.section("seconds per file (in the order run)")
        for name, seconds in _FILE_SECONDS.items():
            terminalreporter.write_line(f"{seconds:8.1f} s  {name}")


MOLECULE = Path(sys.executable).parent / "molecule"


# ---- the converged site: one sequence of site runs per lab, recorded and shared ---------------------

@dataclass
class SiteRun:
    """One ansible-playbook run as fabric_runlog recorded it: its task results and its totals."""

    name: str
    tasks: list  # {"host", "task", "role", "status", "changed", "seconds", ...} per task result
    summary: dict  # {"recap": {host: {...}}, "seconds", "per_host_seconds", "check_mode", ...}

    def changed(self) -> dict:
        return {host: counts["changed"] for host, counts in self.summary["recap"].items()}

    def failures(self) -> dict:
        return {host: counts["failures"] for host, counts in self.summary["recap"].items()}

    def changes(self) -> list:
        """(host, task) of every result that changed (or would have, in check mode). A task that cannot act
        in check mode reports its change through a stand-in named like it plus " (check mode)"."""
        return sorted({(t["host"], t["task"].removesuffix(" (check mode)")) for t in self.tasks if t["changed"]})


@dataclass
class Site:
    """The site's runs on this lab: check mode on the fresh fabric (None when the lab was converged before
    this record began), the converge, the idempotent re-run and check mode on the converged fabric."""

    check_fresh: SiteRun | None
    converge: SiteRun
    rerun: SiteRun | None  # None in a partial record (one converge: a run that does not collect test_site.py)
    check_converged: SiteRun | None
    molecule_output: str  # empty when the runs were not made by Molecule
    fresh_check_before: dict | None = None  # state.sh of every host before and after the fresh check
    fresh_check_after: dict | None = None


def read_runlog(path: Path) -> list[tuple[list, dict]]:
    """The runs in a fabric_runlog file: [(task results, run summary)] in order."""
    runs, tasks = [], []
    for line in path.read_text().splitlines() if path.exists() else []:
        rec = json.loads(line)
        if rec["event"] == "task":
            tasks.append(rec)
        elif rec["event"] == "run":
            runs.append((tasks, rec))
            tasks = []
    return runs


def _site_record(lab: LabInfo) -> Path:
    return lab.ssh_config.parent / "site-runs.json"


def _lab_identity() -> dict:
    """The running VMs by pid: a record of site runs belongs to the VMs it was made on."""
    return {v["name"]: v["pid"] for v in _status()["vms"]}


def site_converged_here(lab: LabInfo) -> bool:
    """Whether the site was converged on these VMs (a record of site runs made on them, each of its VMs still the
    same process): a record left by an earlier lab in the same checkout does not count, a VM booted since (storage2)
    does not take it away."""
    try:
        made_on = json.loads(_site_record(lab).read_text()).get("lab") or {}
    except (OSError, ValueError):
        return False
    running = _lab_identity()
    return bool(made_on) and all(running.get(name) == pid for name, pid in made_on.items())


def _is_fresh(hosts) -> bool:
    """No part of the site is on the lab yet (no pool tank on storage1, no fabricctl, no GPU mount)."""
    probe = hosts["storage1"].run("zpool list -H -o name tank 2>/dev/null; test -e /opt/fabricctl && echo fabricctl")
    return not probe.stdout.strip()


def _run_molecule(runlog: Path, statelog: Path) -> tuple[int, str, float]:
    """`molecule test` of the default scenario: syntax, the hosts' state read (state.yml), check on the fresh
    fabric, the state read again, converge, idempotence, check on the converged fabric, verify."""
    # molecule runs ansible-config and ansible-playbook by name: the virtualenv's bin goes first on PATH
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", PY_COLORS="0", FABRIC_RUNLOG=str(runlog),
               FABRIC_STATE_LOG=str(statelog), PATH=f"{MOLECULE.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    started = time.monotonic()
    proc = run([str(MOLECULE), "test", "-s", "default"], cwd=REPO, capture_output=True, text=True,
               env=env, timeout=3600)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def read_statelog(path: Path) -> list[dict]:
    """The state readings molecule/default/state.yml appended, one {host: state} per reading, in order."""
    readings: list[dict] = []
    for line in path.read_text().splitlines() if path.exists() else []:
        rec = json.loads(line)
        if not readings or rec["host"] in readings[-1]:
            readings.append({})
        readings[-1][rec["host"]] = rec["state"]
    return readings


# The file that reads the record of the site's runs (the others need the site converged, not how it was)
SITE_RECORD_READER = "test_site.py"


@pytest.fixture(scope="session")
def converged(request, lab, hosts) -> Site:
    """The site converged on this lab, and the record of how: built once per lab, reused when present.

    On a fresh lab, Molecule's default scenario runs the site's whole sequence once: syntax, check mode
    on the fresh fabric, converge, idempotence (a second run that must change nothing), check mode on
    the converged fabric, verify. Every run is recorded by the fabric_runlog callback; the record is
    kept beside the lab (.lab/site-runs.json, gone with `lab down`) for later test runs on the same
    lab. On a lab converged some other way (`make demo`), the site is run three times by ansible-playbook
    (converge, re-run, check) and the fresh check is recorded as not seen.

    A run that does not collect test_site.py (the only reader of the record: a shard of `make test`, or a file
    run alone) converges a fresh lab with one site run instead of Molecule's sequence, and records only it
    (``partial``); a later run on the same lab that collects test_site.py makes the rest then, as on a lab
    converged some other way.
    """
    record = _site_record(lab)
    identity = _lab_identity()
    wants_record = any(Path(str(item.fspath)).name == SITE_RECORD_READER for item in request.session.items)
    if site_converged_here(lab) and not (wants_record and json.loads(record.read_text()).get("partial")):
        step("site: converged earlier on this lab (record reused)")
        return _site_from(json.loads(record.read_text()))
    runlog = record.with_suffix(".jsonl")
    runlog.unlink(missing_ok=True)
    if not wants_record and _is_fresh(hosts):
        step(f"site: one converge (this run does not collect {SITE_RECORD_READER}, which reads Molecule's sequence)")
        started = time.monotonic()
        res = ansible_playbook(lab, "playbooks/site.yml", env={"FABRIC_RUNLOG": str(runlog)})
        assert res.rc == 0, res.failure()
        step(f"site converged in {time.monotonic() - started:.0f} s")
        (tasks, summary), = read_runlog(runlog)
        saved = {"lab": identity, "partial": True, "molecule_output": "", "fresh_check_side_effects": [None, None],
                 "runs": {"converge": {"tasks": tasks, "summary": summary}}}
        record.write_text(json.dumps(saved))
        return _site_from(saved)
    if _is_fresh(hosts):
        step("molecule test -s default (syntax, state, check, state, converge, idempotence, check, verify)")
        statelog = record.with_name("site-state.jsonl")
        statelog.unlink(missing_ok=True)
        rc, output, seconds = _run_molecule(runlog, statelog)
        runs = read_runlog(runlog)
        # check and converge run converge.yml, verify runs verify.yml, the state readings state.yml
        site_runs = [r for r in runs if r[1]["playbook"] == "converge.yml"]
        tail = f"{output[-8000:]}"
        assert rc == 0, f"molecule failed (exit {rc}) after {len(site_runs)} site runs:\n{tail}"
        assert len(site_runs) == 4, f"expected 4 site runs from molecule, got {len(site_runs)}:\n{tail}"
        readings = read_statelog(statelog)
        assert len(readings) == 2, f"expected 2 state readings around the fresh check, got {len(readings)}"
        before, after = readings
        step(f"molecule sequence passed in {seconds:.0f} s")
        names = ["check_fresh", "converge", "rerun", "check_converged"]
    else:
        step("site: the lab is converged already; converge, re-run and check with ansible-playbook")
        output = ""
        env = {"FABRIC_RUNLOG": str(runlog)}
        for args in ((), (), ("--check", "--diff")):
            res = ansible_playbook(lab, "playbooks/site.yml", *args, env=env)
            assert res.rc == 0, res.failure()
        site_runs = read_runlog(runlog)
        names = ["converge", "rerun", "check_converged"]
        before = after = None
    saved = {"lab": identity, "molecule_output": output, "fresh_check_side_effects": [before, after],
             "runs": {name: {"tasks": tasks, "summary": summary} for name, (tasks, summary) in zip(names, site_runs,
                                                                                                   strict=True)}}
    record.write_text(json.dumps(saved))
    return _site_from(saved)


def _site_from(saved: dict) -> Site:
    runs = {name: SiteRun(name, r["tasks"], r["summary"]) for name, r in saved["runs"].items()}
    before, after = saved.get("fresh_check_side_effects") or [None, None]
    return Site(check_fresh=runs.get("check_fresh"), converge=runs["converge"], rerun=runs.get("rerun"),
                check_converged=runs.get("check_converged"), molecule_output=saved.get("molecule_output", ""),
                fresh_check_before=before, fresh_check_after=after)


@pytest.fixture(scope="session")
def lab_secrets() -> list[str]:
    """Every secret of the lab's vault (CHAP passwords), decrypted with the lab's committed password: tests
    grep journals, process lists and Ansible output for them."""
    vault = REPO / "inventory" / "lab" / "group_vars" / "all" / "vault.yml"
    proc = run([str(Path(sys.executable).parent / "ansible-vault"), "view", "--vault-id",
                f"lab@{REPO / 'inventory' / 'lab' / 'vault-password.txt'}", str(vault)],
               capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    import yaml  # noqa: PLC0415

    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str) and len(node) >= 8:
            found.append(node)

    walk(yaml.safe_load(proc.stdout))
    assert found, "the lab vault holds no secret"
    return found


@pytest.fixture(scope="session")
def zfs_loaded(hosts):
    """The zfs module is loaded on storage1 (tests that make their own pools need no converged site)."""
    hosts["storage1"].run_expect([0], "modprobe zfs")


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


@pytest.fixture(scope="session")
def storage2(lab, hosts, converged):
    """storage2 booted beside the converged lab (labctl starts only what is missing) and its storage layer
    converged by playbooks/storage.yml: its own pool from its own disks, its LIO target. The lab's
    inventory then names it in storage_nodes; it stays up for the rest of the run."""
    if not any(v["name"] == "storage2" and v["ssh"] for v in _status()["vms"]):
        step("booting storage2")
        proc = run([*LABCTL, "up", "--storage2"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
    status = _status()
    lab.vms.update({v["name"]: v for v in status["vms"]})
    hosts["storage2"] = testinfra.get_host("ssh://storage2", ssh_config=str(lab.ssh_config))
    step("storage.yml on storage2")
    res = ansible_playbook(lab, "playbooks/storage.yml", "--limit", "storage2")
    assert res.rc == 0, res.failure()
    return hosts["storage2"]


@pytest.fixture(scope="session")
def peers(lab, hosts, storage2):
    """storage1 and storage2 with fabricctl on both, each knowing the other (playbooks/fabricctl.yml: the peer
    keys for replica-serve, the storage nodes in each one's configuration), once per run."""
    step("fabricctl.yml on both storage nodes (peers, keys for replica-serve)")
    res = ansible_playbook(lab, "playbooks/fabricctl.yml")
    assert res.rc == 0, res.failure()
    # the GPU nodes' agents learn storage2's portal, as an operator adding a storage node converges them (site.yml):
    # an agent logs in only at the storage nodes its configuration lists
    step("gpu.yml --tags agent (the agents' configuration names storage2)")
    res = ansible_playbook(lab, "playbooks/gpu.yml", "--tags", "agent")
    assert res.rc == 0, res.failure()
    return hosts["storage1"], hosts["storage2"]


# A version published to every GPU node, shared by the files that need one to exist (the reboot test:
# fabricctl's mounts come back). test_fabricctl.py builds and tears down its own.
SHARED = "shared"


@pytest.fixture(scope="session")
def published(hosts, converged) -> str:
    """shared@v1, published read-only to the gpu_nodes group: made when missing, reused when present."""
    storage = hosts["storage1"]
    fctl = Fctl(storage)
    ref = f"{SHARED}@v1"
    listing = fctl.json("list")
    have = {d["name"]: {v["version"]: v for v in d["versions"]} for d in listing["datasets"]}
    version = have.get(SHARED, {}).get("v1")
    if version and sorted(version.get("published_to") or []) == sorted(n for n in hosts if n.startswith("gpu")):
        step(f"{ref}: published earlier on this lab (reused)")
        return ref
    step(f"{ref}: create, ingest, seal and publish to gpu_nodes")
    if SHARED not in have:
        fctl.json("dataset", "create", SHARED, "--size", "128M")
        storage.check_output("rm -rf /srv/shared-src && mkdir -p /srv/shared-src/a && for i in $(seq 1 20); do "
                             "head -c $((4096 * i)) /dev/urandom > /srv/shared-src/a/f$i; done")
        fctl.json("dataset", "ingest", SHARED, "/srv/shared-src/")
    if not version:
        fctl.json("dataset", "seal", SHARED, "v1", "--note", "shared by the integration tests")
    res = fctl("publish", ref, "--to", "gpu_nodes")
    assert res.rc == 0, res.stderr
    return ref


EDIT_CONFIG = """
import json, sys, yaml
c = yaml.safe_load(open("/etc/fabricctl/config.yml"))
exec(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"), indent=2)  # as the role writes it (JSON, a subset of YAML)
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
