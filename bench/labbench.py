"""What the lab benchmarks share: running timed commands on the lab VMs over the lab's ssh_config."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SSH_CONFIG = REPO / ".lab" / "ssh_config"
TIME_MARK = "@@bench-node-seconds"


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


def put(host: str, path: str, text: str) -> None:
    ssh(host, f"cat > {shlex.quote(path)}", input_text=text)
