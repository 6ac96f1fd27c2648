"""The GPU-node agent asked from elsewhere: its verbs through a runner whose command line *is* the request.

A storage node reaches a GPU node with a key whose forced command is ``fabric-node --ssh`` (role fabric_node):
whatever the key asks for, sshd runs the agent, which serves only its own verbs with validated arguments
(``fabric_node.ssh``). ``AgentClient`` sends such requests (``attach NAME@VERSION --holder manual --json``, ...)
through a runner that passes its argv as the request (fabricctl's SSH runner in its ``forced`` mode) and reads
the agent's one JSON object back; a failure comes back as the agent's own problem and fix
(``AgentError``, with the agent's exit status). The publishing service (``services.publish.Publisher``) asks
its hosts this way (dataset versions, a job's checkpoint volume and restores, node records' credentials), and
fabricctl's checkpoint snapshot freezes and thaws its writer through ``AgentWriter``; nothing else runs on a GPU
node. The checkpoint verbs name no storage node: the agent acts for the one the key is bound to.
"""

from __future__ import annotations

import json

from ..base.errors import EXIT_PARTIAL, EXIT_USER, FabricError
from ..base.runner import Runner
from .checkpoints import MAX_JOBS
from .freeze import FreezeInFlight, FreezeRefused

HOLDER = "manual"  # a storage node's attachments are an operator's (fabric_node.ssh refuses any other holder)
WRITER_STATE_CHARS = 400  # the job names of one writer-state request (a request is at most 512 characters)


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

    def attach(self, ref: str, *, current: bool = False) -> dict:
        """Attach as the manual holder; with ``current``, MOUNT_ROOT/NAME/current then points at the version."""
        return self.ask("attach", ref, "--holder", HOLDER, *(["--current"] if current else []), mutating=True)

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

    # ---- a job's checkpoints (node.checkpoints), for the storage node this key belongs to

    def attach_writable(self, job: str, fstype: str) -> dict:
        return self.ask("attach-writable", job, "--fs", fstype, mutating=True)

    def detach_writable(self, job: str, *, force: bool = False) -> dict:
        return self.ask("detach-writable", job, *(["--force"] if force else []), mutating=True)

    def attach_restore(self, job: str, step: int, fstype: str) -> dict:
        return self.ask("attach-restore", job, str(step), "--fs", fstype, mutating=True)

    def detach_restore(self, job: str, step: int, *, force: bool = False) -> dict:
        return self.ask("detach-restore", job, str(step), *(["--force"] if force else []), mutating=True)

    def freeze(self, job: str, seconds: int, *, check: bool = False) -> dict:
        """Freeze JOB's volume on its writer (``check``: only what the freeze checks first, nothing set).
        FreezeRefused when the agent refused before setting anything (exit 1: not mounted read-write there, a bad
        request), FreezeInFlight when an earlier freeze has not returned there."""
        try:
            return self.ask("freeze", job, "--seconds", str(seconds), *(["--dry-run"] if check else []),
                            mutating=not check)
        except AgentError as err:
            if err.reason == FreezeInFlight.reason:
                raise FreezeInFlight(err.problem, err.fix) from None
            if err.exit_code == EXIT_USER:  # the agent's exit 1: refused, nothing changed
                raise FreezeRefused(err.problem, err.fix) from None
            raise

    def thaw(self, job: str, seconds: int) -> dict:
        """Thaw JOB's volume (its timer stopped once nothing is frozen); FreezeInFlight: the timer stays."""
        try:
            return self.ask("thaw", job, "--seconds", str(seconds))
        except AgentError as err:
            if err.reason == FreezeInFlight.reason:
                raise FreezeInFlight(err.problem, err.fix) from None
            raise

    def writer_state(self, jobs: list[str]) -> dict:
        """What of JOBS' volumes is frozen on this writer, and the tasks waiting on a frozen file system: one
        request per batch of jobs that fits a request (fabric_node.ssh's 512 characters), merged."""
        batches: list[list[str]] = []
        for job in jobs:
            if batches and len(batches[-1]) < MAX_JOBS and len(" ".join(batches[-1] + [job])) <= WRITER_STATE_CHARS:
                batches[-1].append(job)
            else:
                batches.append([job])
        out: dict = {"jobs": {}, "frozen": {}, "blocked": []}
        for n, batch in enumerate(batches):
            res = self.ask("writer-state", *batch)
            out["jobs"].update(res.get("jobs") or {})
            out["frozen"].update(res.get("frozen") or {})
            if n == 0:  # the node's waiting tasks, the same in every answer
                out["blocked"] = list(res.get("blocked") or [])
        return out

    def refresh_credentials(self) -> dict:
        return self.ask("refresh-credentials", mutating=True)


class AgentWriter:
    """A checkpoint's writer frozen and thawed by its node agent (``freeze.frozen``'s writer, as ``freeze.Here``
    is through a runner): the same steps, run by the agent on the writer (``node.checkpoints``)."""

    def __init__(self, client: AgentClient, job: str, mountpoint: str):
        self.client, self.job, self.mountpoint = client, job, mountpoint

    def check(self, limit: int) -> None:
        """What the freeze checks first (a dry run): the volume mounted read-write on the writer."""
        self.client.freeze(self.job, limit, check=True)

    def freeze(self, limit: int) -> float:
        """sync, the safety timer, the freeze; the seconds the agent spent before it set the timer."""
        res = self.client.freeze(self.job, limit)
        if res.get("path") != self.mountpoint:  # frozen all the same: the caller thaws it
            raise FabricError(f"{self.client.name or 'the writer'} froze {res.get('path')}, this storage node's "
                              f"configuration says job {self.job} is mounted at {self.mountpoint}",
                              "give fabricctl_checkpoint_mount_root and fabric_node_checkpoint_mount_root the same "
                              "value (playbooks/site.yml)")
        return float(res.get("lead_seconds") or 0.0)

    def thaw(self, limit: int) -> None:
        self.client.thaw(self.job, limit)
