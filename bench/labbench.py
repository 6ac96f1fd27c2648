"""What the lab benchmarks share: running timed commands on the lab VMs over the lab's ssh_config,
fabricctl's own view of the fabric (FACTS), the owner mark on what they create, and one main() that
checks, measures, always cleans up and only then writes its report section."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from report import RESULTS, write_section

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugins" / "module_utils"))
from fabric_core.storage import zfs as core_zfs  # noqa: E402 - the core's reader of OpenZFS 2.3 JSON

SSH_CONFIG = REPO / ".lab" / "ssh_config"
TIME_MARK = "@@bench-node-seconds"
OWNER_PROP = "bench:owner"         # set on every ZFS object a benchmark creates; clean-up destroys only those
LAB_HINT = ("this benchmark needs the lab up and converged: `make lab-up`, then "
            "`.venv/bin/ansible-playbook playbooks/site.yml` (it installs fabricctl on storage1)")

L = TypeVar("L")  # what a benchmark's preflight found out about the lab
R = TypeVar("R")  # what its measurements return

# On the storage node: what fabricctl's own config loader says (where its code is installed: the
# virtualenv's site-packages, which holds fabricctl and fabric_core side by side; pool, roots, lock,
# SSH settings, hosts), so that a benchmark uses fabricctl's names rather than guessing them.
FACTS = r'''
import json, os, shutil, subprocess, sys
shim = shutil.which("fabricctl")
if not shim:
    print(json.dumps({"error": "fabricctl is not installed on this node (not in PATH)"})); sys.exit(0)
# the command is a script of the virtualenv the wheel is installed in: its interpreter knows where
interp = open(shim).readline()[2:].strip()
where = subprocess.run([interp, "-c", "import os, fabric_core; print(os.path.dirname(os.path.dirname("
                        "fabric_core.__file__)))"], capture_output=True, text=True)
if where.returncode != 0:
    print(json.dumps({"error": f"cannot import fabric_core with {interp} (from {shim}): {where.stderr}"}))
    sys.exit(0)
install_dir = where.stdout.strip()
sys.path.insert(0, install_dir)
from fabricctl import config
from fabric_core.base.lock import DEFAULT_PATH as NODE_LOCK
try:
    c = config.load()
except Exception as exc:
    print(json.dumps({"error": f"fabricctl's configuration does not load: {exc}"})); sys.exit(0)
print(json.dumps({"install_dir": install_dir, "config": c.source, "pool": c.pool,
                  "dataset_root": c.dataset_root, "mount_root": c.mount_root,
                  "checkpoint_root": c.checkpoint_root, "checkpoint_mount_root": c.checkpoint_mount_root,
                  "node_lock": NODE_LOCK, "key_file": c.ssh.key_file, "known_hosts": c.ssh.known_hosts,
                  "ssh_user": c.ssh.user, "ssh_port": c.ssh.port, "portal_ip": c.portal.ip,
                  "hosts": {n: h.address for n, h in c.hosts.items()}}))
'''


class BenchError(Exception):
    """A step failed; the message says which one and why."""


@dataclass
class Timed:
    stdout: str
    stderr: str
    rc: int
    wall: float        # seconds, measured on the host around the ssh call
    node: float        # seconds, measured on the node by GNU time around the command

    def json(self) -> dict:
        try:
            return json.loads(self.stdout)
        except json.JSONDecodeError as exc:
            raise BenchError(f"expected JSON on stdout, got: {self.stdout[:500]!r} ({exc})") from None


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def ssh(host: str, command: str, *, check: bool = True, timeout: float = 1800,
        input_text: str | None = None) -> subprocess.CompletedProcess:
    """Run a shell command as root on a lab VM (through the lab's ssh_config, as bench/site_bench.py)."""
    io = {"input": input_text} if input_text is not None else {"stdin": subprocess.DEVNULL}
    try:
        proc = subprocess.run(["ssh", "-F", str(SSH_CONFIG), host, command], cwd=REPO, text=True,
                              capture_output=True, timeout=timeout, **io)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{host}: `{command[:300]}` did not finish within {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        raise BenchError(f"{host}: `{command[:300]}` exited {proc.returncode}:\n{tail(proc.stderr or proc.stdout)}")
    return proc


def timed(host: str, command: str, *, check: bool = True, timeout: float = 3600) -> Timed:
    """Run a command on a VM, timed on the VM (GNU time, %e) and on the host (around ssh)."""
    wrapped = (f'tf=/tmp/.bench-time.$$; /usr/bin/time -f %e -o "$tf" sh -c {shlex.quote(command)}; rc=$?; '
               f'echo "{TIME_MARK} $(tail -n 1 "$tf" 2>/dev/null)" >&2; rm -f "$tf"; exit $rc')
    started = time.monotonic()
    proc = ssh(host, wrapped, check=False, timeout=timeout)
    wall = time.monotonic() - started
    node, rest = None, []
    for line in proc.stderr.splitlines():
        if line.startswith(TIME_MARK):
            try:
                node = float(line.split()[-1])
            except (ValueError, IndexError):
                node = None
        else:
            rest.append(line)
    stderr = "\n".join(rest)
    if check and proc.returncode != 0:
        raise BenchError(f"{host}: `{command[:300]}` exited {proc.returncode}:\n{tail(stderr or proc.stdout)}")
    if node is None:
        raise BenchError(f"{host}: no time measured for `{command[:300]}` (is /usr/bin/time installed?)")
    return Timed(proc.stdout, stderr, proc.returncode, wall, node)


def vm_cpu_ticks() -> dict[str, int]:
    """CPU time so far (user + system, clock ticks) of each running lab VM's QEMU process, read from this host's
    /proc: the VMs are emulated on this host, so this is what running each of them costs."""
    status = json.loads(subprocess.run([sys.executable, str(REPO / "lab" / "labctl.py"), "status", "--json"],
                                       capture_output=True, text=True, check=True).stdout)
    ticks = {}
    for vm in status["vms"]:
        try:
            fields = Path(f"/proc/{vm['pid']}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, TypeError):
            continue  # not running
        ticks[vm["name"]] = int(fields[11]) + int(fields[12])  # utime, stime (stat fields 14 and 15)
    return ticks


def vm_cores(before: dict[str, int], after: dict[str, int], seconds: float) -> dict[str, float]:
    """Each VM's average CPU use between two ``vm_cpu_ticks()`` readings ``seconds`` apart, in host cores
    (1.0: one core busy all the time; a VM with two vCPUs can reach 2.0)."""
    hz = os.sysconf("SC_CLK_TCK")
    return {name: round((after[name] - ticks) / hz / seconds, 3) for name, ticks in before.items()
            if name in after and seconds > 0}


def put(host: str, path: str, text: str) -> None:
    ssh(host, f"cat > {shlex.quote(path)}", input_text=text)


def fabricctl_facts(storage: str, *others: str) -> dict:
    """The lab is up, every named VM answers over SSH, and fabricctl is installed on the storage node
    with a configuration that loads and names the other VMs: return that configuration's facts (FACTS)."""
    if not SSH_CONFIG.exists():
        raise BenchError(f"the lab is not up ({SSH_CONFIG} is missing); {LAB_HINT}")
    for host in (storage, *others):
        try:
            ssh(host, "true", timeout=120)
        except BenchError as exc:
            raise BenchError(f"cannot reach {host} over SSH ({exc}); {LAB_HINT}") from None
    facts = json.loads(ssh(storage, f"python3 -c {shlex.quote(FACTS)}").stdout)
    if "error" in facts:
        raise BenchError(f"{storage}: {facts['error']}; {LAB_HINT}")
    missing = [h for h in others if h not in facts["hosts"]]
    if missing:
        raise BenchError(f"fabricctl's config on {storage} does not name {', '.join(missing)}; {LAB_HINT}")
    return facts


def zfs_exists(host: str, name: str) -> bool:
    return ssh(host, f"zfs list -H -o name {shlex.quote(name)} >/dev/null 2>&1", check=False).returncode == 0


def zfs_props(host: str, name: str, props: str) -> dict[str, str] | None:
    """{property: value} of a dataset or snapshot on a VM, read as OpenZFS 2.3 JSON (`zfs get -j -p`,
    through the core's reader): values as `zfs get -Hp` prints them, "-" when unset; None when NAME does not
    exist. No --json-int: it would print all-digit values (user properties too) as numbers (see zjson.py)."""
    proc = ssh(host, f"zfs get -j -p {shlex.quote(props)} {shlex.quote(name)}", check=False)
    if proc.returncode != 0:
        if "does not exist" in proc.stderr:
            return None
        raise BenchError(f"{host}: `zfs get {props} {name}` exited {proc.returncode}:\n{tail(proc.stderr)}")
    got = core_zfs.parse_get(proc.stdout).get(name, {})
    return {prop: value for prop, (value, _source) in got.items()}


def zfs_value(host: str, name: str, prop: str) -> str:
    """One property of an existing dataset on a VM (zfs_props); BenchError when the dataset does not exist."""
    props = zfs_props(host, name, prop)
    if props is None or prop not in props:
        raise BenchError(f"{host}: {name} does not exist (reading its {prop})")
    return props[prop]


def snapshot_names(host: str, dataset: str) -> list[str]:
    """The snapshots of DATASET and of what is below it, oldest first (`zfs list -j -t snapshot -o name -r`)."""
    proc = ssh(host, f"zfs list -j -p -t snapshot -o name -s createtxg -r {shlex.quote(dataset)}")
    return [row["name"] for row in core_zfs.list_rows(proc.stdout, ("name",), by_txg=True)]


def owner_of(host: str, name: str) -> str:
    """The benchmark that made a ZFS object (its OWNER_PROP), or "" (or "-") when none did."""
    props = zfs_props(host, name, OWNER_PROP)
    return "" if props is None else props.get(OWNER_PROP, "")


def ratio(a: float | None, b: float | None) -> str:
    """a / b for a report table: two decimals, three below 1; "-" when either is missing."""
    if a is None or not b:
        return "-"
    return f"{a / b:.2f}" if a / b >= 1 else f"{a / b:.3f}"


def bench_args(doc: str, *, rounds: int, rounds_help: str, keep: str) -> argparse.Namespace:
    """The command line every lab benchmark of one version takes: --rounds N (at least 1; ``rounds`` by default),
    --keep (``keep``, what it made, stays after the run) and --cleanup-only."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=rounds, help=f"{rounds_help} (default {rounds})")
    parser.add_argument("--keep", action="store_true", help=f"keep {keep} after the run")
    parser.add_argument("--cleanup-only", action="store_true", help="remove this benchmark's leftovers and stop")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def run_bench(bench: str, section: str, *, checking: str, preflight: Callable[[], L],
              leftovers: Callable[[L], list[str]], cleanup_only: bool, measure: Callable[[L], R],
              cleanup: Callable[[L], list[str]], rows: Callable[[L, R, str], list[str]],
              cleanup_note: str = "clean-up", partial: Callable[[], object] | None = None) -> int:
    """A lab benchmark's main(), returning its exit status: check the precondition (2 when it does not
    hold), remove leftovers of an earlier run, measure, then clean up whatever happened, and write the
    report section only when all of it worked, so a failed or interrupted run never leaves figures in
    docs/benchmarks.md.

    bench names the run in messages ("bench-publish"); checking says what preflight checks. rows(lab,
    result, when) builds the section; partial() gives what was measured before a failure, printed (not
    written) so that a long run is not lost.
    """
    say(f"checking the lab ({checking})")
    try:
        lab = preflight()
    except BenchError as exc:
        print(f"\n{bench}: precondition not met: {exc}", file=sys.stderr)
        return 2
    left = leftovers(lab)
    if left:
        print(f"{bench}: leftovers of an earlier run could not be removed: " + "; ".join(left), file=sys.stderr)
        return 1
    if cleanup_only:
        say("clean-up done")
        return 0
    result, failure = None, None
    try:
        result = measure(lab)
    except BenchError as exc:
        failure = exc
    except KeyboardInterrupt:
        failure = BenchError("interrupted")
    finally:
        say(cleanup_note)
        left = cleanup(lab)
    if left:
        print(f"{bench}: NOT cleaned up (remove by hand): " + "; ".join(left), file=sys.stderr)
    if failure is not None:
        print(f"\n{bench} FAILED: {failure}", file=sys.stderr)
        done = partial() if partial is not None else None
        if done:
            print("figures measured before the failure (not written):\n" + json.dumps(done, indent=1),
                  file=sys.stderr)
        return 1
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    write_section(section, rows(lab, result, when))
    print(RESULTS.read_text())
    return 0 if not left else 1
