"""The controller's way to the storage nodes: fabricctl's own grant, revoke and show, run where fabricctl runs.

Grants are LIO state on the storage nodes (``fabric_core.services.grants``, through ``fabricctl grant``: the
export on every storage node holding the version, one ACL with the host's own CHAP, the configuration saved
once). The controller does not reimplement any of it: it runs fabricctl's commands with ``--json`` and reads their
one JSON object, either here (``Fabricctl.local``: the controller runs on a storage node, as a systemd service)
or on a storage node over SSH (``Fabricctl.ssh``: the controller runs in the cluster; the key it uses is
authorized on the storage node with ``command="fabric-csi serve-grants",restrict``, which runs nothing but these
three requests: ``serve_grants``). Each call has a bounded time (``TIMEOUT``; ssh's connect and keep-alive
bounds besides), and a failure comes back as fabricctl's own problem and fix, with its gRPC code from
``errors.code_of_fabricctl``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil

from fabric_core.base.names import validate_hostname
from fabric_core.base.runner import LocalRunner, Runner

from .errors import Code, CsiError, code_of_fabricctl

TIMEOUT = 300.0  # one fabricctl request: a grant waits for the storage node's lock and asks its peers
CONNECT_TIMEOUT = 10  # ssh's ConnectTimeout to the storage node
FABRICCTL = "/usr/local/sbin/fabricctl"  # role fabricctl's link (fabricctl_bin)
SSH_EXIT = 255  # ssh's own failure (could not connect, authenticate, or the connection broke)


def find_fabricctl(path: str = "") -> str:
    """The fabricctl command: ``path``, else the one on PATH, else role fabricctl's link."""
    return path or shutil.which("fabricctl") or FABRICCTL


class Fabricctl:
    """fabricctl's grant, revoke and show, answered as JSON (``prefix``: the argv before the request: the command
    here, or ssh to a storage node; ``where`` names it in messages)."""

    def __init__(self, prefix: list[str], *, where: str, runner: Runner | None = None, remote: bool = False,
                 files: tuple = ()):
        self.prefix = list(prefix)
        self.where = where
        self.remote = remote
        self.files = files  # what the backend reads (an ssh key, its known_hosts): Probe checks them
        self.runner = runner or LocalRunner(timeout=TIMEOUT)

    @classmethod
    def local(cls, fabricctl: str = "", runner: Runner | None = None) -> Fabricctl:
        return cls([find_fabricctl(fabricctl)], where="this node", runner=runner)

    @classmethod
    def ssh(cls, host: str, *, key: str, known_hosts: str, user: str = "root", port: int = 22,
            runner: Runner | None = None) -> Fabricctl:
        prefix = ["ssh", "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT}",
                  "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", "-o", "StrictHostKeyChecking=yes",
                  "-o", f"UserKnownHostsFile={known_hosts}", "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
                  "-i", key, "-p", str(int(port)), "-l", user, host]
        return cls(prefix, where=host, runner=runner, remote=True, files=(key, known_hosts))

    def health(self) -> str:
        """"" when the backend can be asked (its command or its key's files are there), else why not."""
        if self.remote:
            unreadable = [path for path in self.files if not os.access(path, os.R_OK)]
            return (f"cannot read {', '.join(unreadable)} (the controller's key to the storage node {self.where}, or "
                    "its known_hosts)") if unreadable else ""
        command = self.prefix[0]
        if not (os.path.isfile(command) and os.access(command, os.X_OK)) and not shutil.which(command):
            return f"fabricctl is not installed here ({command}): run the controller on a storage node " \
                   "(role fabricctl), or give it --storage-node"
        return ""

    # ---- the three requests

    def grant(self, ref: str, node: str) -> dict:
        return self.ask("grant", ref, "--to", validate_hostname(node), partial_ok=True)

    def revoke(self, ref: str, node: str) -> dict:
        return self.ask("revoke", ref, "--from", validate_hostname(node), partial_ok=True)

    def show(self, ref: str) -> dict:
        return self.ask("show", ref)

    def ask(self, *words: str, partial_ok: bool = False) -> dict:
        """One request, its JSON answer; CsiError with fabricctl's problem and fix and the code of its error.
        ``partial_ok``: fabricctl's partial success (exit 3: this storage node did it, a peer did not) is a
        success: the host attaches from the storage nodes that did (the others are named in the answer)."""
        request = [*words, "--json"]
        argv = [*self.prefix, shlex.join(request)] if self.remote else [*self.prefix, *request]
        res = self.runner.run(argv, check=False)
        try:
            answer = json.loads(res.stdout) if res.stdout.strip() else None
        except ValueError:
            answer = None
        if res.rc == 0 and isinstance(answer, dict):
            return answer
        if isinstance(answer, dict) and "error" in answer:
            status = int(answer.get("exit_status") or res.rc or 1)
            if partial_ok and status == 3 and answer.get("nodes"):
                return answer
            fix = str(answer.get("fix") or "")
            raise CsiError(code_of_fabricctl(str(answer.get("error_type") or ""), status),
                           f"{self.where}: fabricctl {words[0]}: {answer['error']}" + (f" (fix: {fix})" if fix else ""))
        said = (res.stderr.strip().splitlines() or res.stdout.strip().splitlines() or ["no answer"])[-1][:300]
        if self.remote and res.rc == SSH_EXIT:
            raise CsiError(Code.UNAVAILABLE, f"cannot reach the storage node {self.where} over SSH: {said} (fix: "
                           "check that it is up, that the controller's key is authorized there with "
                           "command=\"fabric-csi serve-grants\" and that its host key is in the known_hosts given)")
        raise CsiError(Code.INTERNAL, f"{self.where}: fabricctl {words[0]} did not answer (exit {res.rc}): {said}")
