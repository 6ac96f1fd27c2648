"""The GPU-node agent asked from elsewhere: its verbs through a runner whose command line *is* the request.

A storage node reaches a GPU node with a key whose forced command is ``fabric-node --ssh`` (role fabric_node):
whatever the key asks for, sshd runs the agent, which serves only its own verbs with validated arguments
(``fabric_node.ssh``). ``AgentClient`` sends such requests (``attach NAME@VERSION --holder manual --json``, ...)
through a runner that passes its argv as the request (fabricctl's SSH runner in its ``forced`` mode) and reads
the agent's one JSON object back; a failure comes back as the agent's own problem and fix
(``AgentError``, with the agent's exit status). The publishing service (``services.publish.Publisher``) asks
its hosts this way; nothing else runs on a GPU node.
"""

from __future__ import annotations

import json

from ..base.errors import EXIT_PARTIAL, EXIT_USER, FabricError
from ..base.runner import Runner

HOLDER = "manual"  # a storage node's attachments are an operator's (fabric_node.ssh refuses any other holder)


class AgentError(FabricError):
    """The agent refused or failed; ``problem``/``fix`` are its own, ``exit_code`` its exit status (1: refused,
    nothing changed), ``reason`` its reason when it gave one (not_granted, unreachable)."""

    def __init__(self, problem: str, fix: str = "", exit_code: int = EXIT_USER, reason: str = ""):
        super().__init__(problem, fix)
        self.exit_code = exit_code
        self.reason = reason


class AgentClient:
    """One GPU node's agent (``runner``: its argv is the request). ``name`` names the host in errors."""

    def __init__(self, runner: Runner, name: str = ""):
        self.runner = runner
        self.name = name

    def ask(self, *words: str, mutating: bool = False) -> dict:
        """One request, its JSON answer; AgentError when the agent refused or failed. A mutating request in a
        dry run is sent with --dry-run (the agent plans it and reads everything)."""
        argv = [*words, "--json"]
        if mutating and self.runner.dry_run:
            argv.append("--dry-run")
        res = self.runner.run(argv, check=False)
        try:
            answer = json.loads(res.stdout) if res.stdout.strip() else None
        except ValueError:
            answer = None
        where = f"{self.name}: " if self.name else ""
        if res.rc != 0 or not isinstance(answer, dict):
            if isinstance(answer, dict) and "problem" in answer:
                raise AgentError(str(answer["problem"]), str(answer.get("fix") or ""),
                                 int(answer.get("exit") or res.rc or EXIT_USER), str(answer.get("reason") or ""))
            said = (res.stderr.strip().splitlines() or res.stdout.strip().splitlines() or ["no answer"])[-1]
            raise AgentError(f"{where}the node agent did not answer `{words[0]}` (exit {res.rc}): {said[:300]}",
                             "install the agent there (role fabric_node: playbooks/site.yml) and check that this "
                             "storage node's key runs it (`fabric-node --ssh` in its authorized_keys)",
                             res.rc if res.rc in (EXIT_USER, EXIT_PARTIAL) else 5)
        return answer

    def attach(self, ref: str) -> dict:
        return self.ask("attach", ref, "--holder", HOLDER, mutating=True)

    def detach(self, ref: str, *, force: bool = False) -> dict:
        return self.ask("detach", ref, "--holder", HOLDER, *(["--force"] if force else []), mutating=True)

    def in_use(self, ref: str) -> list[str]:
        return list(self.ask("in-use", ref)["users"])

    def list(self) -> dict:
        return self.ask("list")

    def current(self, name: str, version: str | None = "") -> dict:
        """Read MOUNT_ROOT/NAME/current (``version`` ""), point it at VERSION, or remove it (None)."""
        words = ["current", name] + ([] if version == "" else ["--none" if version is None else version])
        return self.ask(*words, mutating=version != "")

    def verify(self, ref: str, workers: int) -> dict:
        return self.ask("verify", ref, "--workers", str(workers))
