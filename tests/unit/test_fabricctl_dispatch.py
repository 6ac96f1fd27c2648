"""fabricctl's dispatch (main.py), the one place every command goes through: the exit statuses (the
table pinned, --help and docs/fabricctl.md listing the same codes, what main returns for each way a
command ends), the node lock around every change and never around a read or a dry run, the one
journal record of each change (its fields; never a secret), and --version's probes.

Commands are the real ones with their ``run`` replaced (the parsers, MUTATING and dispatch are real);
conftest.py puts the node lock in tmp_path."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import re
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
from fabric_core.base import errors as core_errors
from fabric_core.base.errors import (
    AlreadyExists,
    Busy,
    CommandError,
    FabricError,
    InvalidName,
    LockHeld,
    NotFound,
    UnsafeOperation,
    UserError,
)
from fabric_core.base.lock import node_lock

from fabricctl import about, audit, commands, errors
from fabricctl.commands import (
    checkpoint_rollback,
    checkpoint_snapshot,
    dataset_ingest,
    dataset_seal,
    list_versions,
    publish,
    rotate,
    status,
    verify,
)
from fabricctl.errors import PartialFailure
from fabricctl.faults import InjectedFault
from fabricctl.main import DESCRIPTION, build_parser, main
from fabricctl.remote import ConnectionLost, HostKeyMismatch, HostUnreachable

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cret-s3cret"  # CHAP password of the test config
MUTUAL = "other-s3cret"  # CHAP mutual password
NOTE_SECRET = "note-with-an-encryption-key-0123456789abcdef"

CONFIG = f"""\
pool: tank
iqn_base: iqn.2026-11.io.fabric.lab.fabricctl
portal: {{ip: 10.77.0.11}}
hosts:
  gpu1: {{address: 10.77.0.21, initiator: "iqn.2026-11.io.fabric.lab:gpu1",
         chap: {{userid: gpu1, password: {SECRET}, mutual_userid: storage1, mutual_password: {MUTUAL}}}}}
  gpu2: {{address: 10.77.0.22, initiator: "iqn.2026-11.io.fabric.lab:gpu2",
         chap: {{userid: gpu2, password: gpu2-s3cret-1, mutual_userid: storage1, mutual_password: gpu2-mutual-1}}}}
groups:
  gpu_nodes: [gpu1, gpu2]
lock: {{wait_seconds: 0}}
"""

EXPECTED_TABLE = {0: "success", 1: "refused", 2: "usage", 3: "partial", 4: "lock", 5: "unexpected", 130: "interrupted"}
MUTATING = {("dataset", "create"), ("dataset", "ingest"), ("dataset", "seal"), ("dataset", "destroy"), ("publish",),
            ("unpublish",), ("checkpoint", "volume", "create"), ("checkpoint", "volume", "destroy"),
            ("checkpoint", "snapshot"), ("checkpoint", "restore"), ("checkpoint", "rollback"), ("rotate",),
            ("access", "sync"), ("replicate",), ("checkpoint", "replicate"), ("tag",), ("untag",), ("grant",),
            ("revoke",)}
# replica-serve changes the fabric for one request only (receive), so its MUTATING is a function of the request
BY_REQUEST = {("replica-serve",)}


@pytest.fixture
def cfg(tmp_path) -> str:
    path = tmp_path / "config.yml"
    path.write_text(CONFIG)
    return str(path)


@pytest.fixture
def records() -> list[dict]:
    return []


@pytest.fixture
def fab(cfg, records):
    """fab(*args) -> main(["--config", cfg, *args]) with the journal records collected."""
    return lambda *args: main(["--config", cfg, *args], sink=records.append)


def replace_run(monkeypatch, module, fn) -> list:
    """Replace a command's run by fn(ctx, args); returns the list of the args it was called with."""
    calls: list = []

    def run(ctx, args):
        calls.append(args)
        return fn(ctx, args)

    monkeypatch.setattr(module, "run", run)
    return calls


def ok(ctx, args) -> int:
    return 0


# --------------------------------------------------------------------------------------------
# the table


def test_the_exit_status_table_is_pinned():
    assert [code for code, _ in errors.EXIT_STATUSES] == list(EXPECTED_TABLE)
    for code, meaning in errors.EXIT_STATUSES:
        assert EXPECTED_TABLE[code] in meaning, (code, meaning)
    assert (errors.EXIT_OK, errors.EXIT_USER, errors.EXIT_USAGE, errors.EXIT_PARTIAL, errors.EXIT_LOCKED,
            errors.EXIT_UNEXPECTED, errors.EXIT_INTERRUPTED) == (0, 1, 2, 3, 4, 5, 130)
    # one table, in the core library; fabricctl re-exports the same objects
    assert errors.EXIT_STATUSES is core_errors.EXIT_STATUSES and errors.LockHeld is core_errors.LockHeld


@pytest.mark.parametrize("cls, code", [
    (UserError, 1), (InvalidName, 1), (NotFound, 1), (AlreadyExists, 1), (Busy, 1), (UnsafeOperation, 1),
    (verify.VerifyFailed, 1), (HostUnreachable, 1), (HostKeyMismatch, 1),
    (PartialFailure, 3),
    (LockHeld, 4),
    (FabricError, 5), (InjectedFault, 5), (ConnectionLost, 5),
])
def test_each_error_class_maps_to_its_status(cls, code):
    assert cls("problem", "fix").exit_code == code


def test_an_unexpectedly_failing_command_is_status_5():
    assert CommandError(["zfs", "destroy", "tank/x"], 1, stderr="busy").exit_code == 5


def all_subclasses(cls) -> set:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | all_subclasses(sub)
    return out


def test_every_error_class_has_a_status_of_the_table():
    import fabric_core.node.iscsi  # noqa: F401 - they define error classes
    import fabric_core.node.manifest  # noqa: F401
    import fabric_core.storage.lio  # noqa: F401
    import fabric_core.storage.lzc  # noqa: F401

    classes = all_subclasses(FabricError) | {FabricError}
    assert len(classes) > 15
    table = dict(errors.EXIT_STATUSES)
    for cls in classes:
        assert cls.exit_code in table and cls.exit_code not in (0, 2, 130), cls


def help_statuses() -> list[int]:
    text = build_parser().format_help()
    block = text.split("Exit statuses:\n", 1)[1].split("\n\n", 1)[0]
    return [int(m.group(1)) for m in re.finditer(r"^\s+(\d+)\s+\S", block, re.M)]


def docs_statuses() -> list[int]:
    text = (REPO / "docs" / "fabricctl.md").read_text()
    section = text.split("\n## Exit statuses\n", 1)[1].split("\n## ", 1)[0]
    return [int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", section, re.M)]


def test_help_and_docs_list_exactly_the_statuses_of_the_table():
    table = [code for code, _ in errors.EXIT_STATUSES]
    assert help_statuses() == table
    assert docs_statuses() == table
    for code, meaning in errors.EXIT_STATUSES:  # --help prints the table itself
        assert f"{code:>5}  {meaning}\n" in DESCRIPTION


# --------------------------------------------------------------------------------------------
# what main returns


def test_a_usage_error_is_2_and_nothing_runs_or_is_logged(fab, records, monkeypatch, capsys):
    calls = replace_run(monkeypatch, publish, ok)
    assert fab("publish", "imagenet@v1") == 2  # --to is missing
    assert fab("publish", "imagenet@v1", "--to", "gpu1", "--bogus") == 2
    assert fab("no-such-command") == 2
    assert "the following arguments are required: --to" in capsys.readouterr().err
    assert calls == [] and records == []


def test_help_and_a_group_without_a_command_are_0(fab, capsys):
    assert main(["--help"]) == 0
    assert fab("checkpoint") == 0
    assert "checkpoint volumes and snapshots" in capsys.readouterr().out


def fan_with(fail: set[str]):
    """A command that fans out over --to and fails on the hosts in ``fail``."""
    def run(ctx, args):
        hosts = ctx.config.resolve_targets(args.to)

        def one(host, step):
            if host.name in fail:
                raise UserError(f"{host.name}: no route to host", "check its network")
            return "mounted"

        ctx.fan(hosts, one, "publish", quiet=True).raise_for_partial("publish")
        return 0
    return run


def raising(exc: BaseException):
    def run(ctx, args):
        ctx.config  # noqa: B018 - loaded, as a real command does
        raise exc
    return run


@pytest.mark.parametrize("run, code, result, error", [
    (ok, 0, "ok", ""),
    (fan_with(set()), 0, "ok", ""),
    (raising(Busy("imagenet@v1 is in use: gpu1: 4242 python", "stop it")), 1, "refused", "Busy"),
    (raising(UnsafeOperation("would destroy newer checkpoints", "name them")), 1, "refused", "UnsafeOperation"),
    (fan_with({"gpu2"}), 3, "partial", "PartialFailure"),
    (raising(LockHeld("another fabric command is running: x, pid 1, since y", "wait")), 4, "refused", "LockHeld"),
    (raising(CommandError(["zfs", "destroy", "tank/x"], 1, stderr="dataset is busy")), 5, "failed", "CommandError"),
    (raising(InjectedFault("injected fault at 'x'", "unset it")), 5, "failed", "InjectedFault"),
    (raising(RuntimeError("a bug")), 5, "failed", "RuntimeError"),
    (raising(KeyboardInterrupt()), 130, "interrupted", "KeyboardInterrupt"),
], ids=["ok", "ok-fanout", "busy", "unsafe", "partial", "lockheld", "commanderror", "fault", "bug", "ctrl-c"])
def test_each_way_a_change_ends_has_its_status_and_one_record(fab, records, monkeypatch, capsys, run, code,
                                                              result, error):
    monkeypatch.delenv("FABRICCTL_DEBUG", raising=False)
    calls = replace_run(monkeypatch, publish, run)
    assert fab("publish", "imagenet@v1", "--to", "gpu_nodes") == code
    assert len(calls) == 1 and len(records) == 1
    rec = records[0]
    assert (rec["FABRIC_RESULT"], rec["FABRIC_EXIT_STATUS"], rec["FABRIC_ERROR"]) == (result, str(code), error)
    assert rec["MESSAGE"].startswith(f"publish imagenet@v1: {result} (exit {code}) in ")
    err = capsys.readouterr().err
    if code in (1, 3, 4, 5):
        assert "fabricctl: " in err and ("error" in err)


def test_a_user_error_from_a_real_command_is_1(fab, records, capsys):
    # the real dataset seal: an invalid version is refused before anything else (and logged: a change refused)
    assert fab("dataset", "seal", "imagenet", "V1") == 1
    assert "invalid" in capsys.readouterr().err.lower()
    assert [r["FABRIC_RESULT"] for r in records] == ["refused"]


def test_the_success_record_field_by_field(fab, records, monkeypatch):
    replace_run(monkeypatch, publish, fan_with(set()))
    assert fab("publish", "imagenet@v1", "--to", "gpu_nodes") == 0
    (rec,) = records
    duration = float(rec.pop("FABRIC_DURATION_SECONDS"))
    assert 0 <= duration < 30
    assert rec == {"MESSAGE": f"publish imagenet@v1: ok (exit 0) in {duration:.1f} s; hosts gpu1,gpu2",
                   "SYSLOG_IDENTIFIER": "fabricctl", "PRIORITY": "6", "FABRIC_COMMAND": "publish",
                   "FABRIC_TARGET": "imagenet@v1", "FABRIC_HOSTS": "gpu1,gpu2", "FABRIC_HOSTS_FAILED": "",
                   "FABRIC_HOSTS_REQUESTED": "--to gpu_nodes", "FABRIC_RESULT": "ok", "FABRIC_EXIT_STATUS": "0",
                   "FABRIC_ERROR": ""}


def test_the_refusal_record_names_the_error_class_not_its_text(fab, records, monkeypatch):
    replace_run(monkeypatch, publish, raising(Busy("imagenet@v1 is in use: gpu1: 4242 python train.py", "stop")))
    assert fab("publish", "imagenet@v1", "--to", "gpu1") == 1
    (rec,) = records
    assert (rec["FABRIC_RESULT"], rec["FABRIC_EXIT_STATUS"], rec["FABRIC_ERROR"], rec["PRIORITY"]) == (
        "refused", "1", "Busy", "5")
    assert rec["FABRIC_HOSTS"] == "" and rec["FABRIC_HOSTS_REQUESTED"] == "--to gpu1"
    assert "train.py" not in json.dumps(rec)


def test_the_partial_failure_record_names_the_failed_hosts(fab, records, monkeypatch, capsys):
    replace_run(monkeypatch, publish, fan_with({"gpu2"}))
    assert fab("publish", "imagenet@v1", "--to", "gpu1,gpu2") == 3
    (rec,) = records
    assert (rec["FABRIC_RESULT"], rec["FABRIC_EXIT_STATUS"], rec["FABRIC_ERROR"], rec["PRIORITY"]) == (
        "partial", "3", "PartialFailure", "4")
    assert (rec["FABRIC_HOSTS"], rec["FABRIC_HOSTS_FAILED"]) == ("gpu1,gpu2", "gpu2")
    assert rec["MESSAGE"].endswith("; hosts gpu1,gpu2; failed on gpu2; PartialFailure")
    assert "gpu2: gpu2: no route to host" in capsys.readouterr().err


@pytest.mark.parametrize("argv, target, requested", [
    (["publish", "imagenet@v1", "--to", "gpu_nodes"], "imagenet@v1", "--to gpu_nodes"),
    (["unpublish", "imagenet@v1", "--from", "gpu2"], "imagenet@v1", "--from gpu2"),
    (["unpublish", "imagenet@v1"], "imagenet@v1", ""),
    (["dataset", "create", "imagenet", "--size", "10G"], "imagenet", ""),
    (["dataset", "ingest", "imagenet", "/import/a", "/import/b"], "imagenet", ""),
    (["dataset", "seal", "imagenet", "v2", "--note", NOTE_SECRET], "imagenet@v2", ""),
    (["dataset", "destroy", "imagenet", "--yes"], "imagenet", ""),
    (["checkpoint", "volume", "create", "llama", "--size", "1G", "--writer", "gpu1"], "llama", "--writer gpu1"),
    (["checkpoint", "volume", "destroy", "llama", "--yes"], "llama", ""),
    (["checkpoint", "snapshot", "llama", "--step", "12000", "--metric", "loss=1.5"], "llama@step-12000", ""),
    (["checkpoint", "restore", "llama", "--step", "200", "--to", "gpu_nodes"], "llama@step-200", "--to gpu_nodes"),
    (["checkpoint", "rollback", "llama", "--step", "100", "--discard-newer", "200"], "llama@step-100", ""),
    (["rotate"], "-", ""),
])
def test_targets_and_hosts_of_every_change(argv, target, requested):
    args = build_parser().parse_args(argv)
    assert audit.target_of(args) == target
    rec = audit.record(args, {}, 0, 1.0)
    assert rec.command == " ".join(args.command_path) and rec.hosts_requested == requested
    line = audit.command_line(args)
    assert line == " ".join(["fabricctl", *args.command_path, *([target] if target != "-" else []),
                             *requested.split()])
    assert NOTE_SECRET not in line and NOTE_SECRET not in json.dumps(rec.fields())


def test_no_chap_secret_ever_reaches_the_record_or_the_lock(fab, records, monkeypatch, node_lock_in_tmp, capsys):
    held = []

    def leaky(ctx, args):
        held.append(Path(node_lock_in_tmp).read_text())
        chap = ctx.config.hosts["gpu1"].chap
        assert chap.password == SECRET  # the command has the secrets at hand
        raise CommandError(["iscsiadm", "-m", "node", "-o", "update", "-n", "node.session.auth.password", "-v",
                            chap.password], 1, stderr=f"bad value {chap.mutual_password}")

    replace_run(monkeypatch, publish, leaky)
    staging_lock = Path(node_lock_in_tmp).parent / "locks" / "staging-imagenet.lock"  # a seal holds its staging's
    replace_run(monkeypatch, dataset_seal, lambda ctx, args: (held.append(staging_lock.read_text()), 0)[1])
    assert fab("publish", "imagenet@v1", "--to", "gpu_nodes") == 5
    assert fab("dataset", "seal", "imagenet", "v2", "--note", NOTE_SECRET) == 0
    capsys.readouterr()
    assert [r["FABRIC_RESULT"] for r in records] == ["failed", "ok"] and len(held) == 2
    for text in [json.dumps(r) for r in records] + held:
        for secret in (SECRET, MUTUAL, NOTE_SECRET):
            assert secret not in text
    assert json.loads(held[1])["command"] == "fabricctl dataset seal imagenet@v2"


# --------------------------------------------------------------------------------------------
# the node lock in the dispatch


def test_every_command_declares_whether_it_changes_the_fabric():
    declared = {module.PATH: module.MUTATING for module in commands.ALL}
    assert {path for path, v in declared.items() if not isinstance(v, bool)} == BY_REQUEST
    assert {path for path, mutating in declared.items() if mutating is True} == MUTATING
    read_only = {path for path, mutating in declared.items() if mutating is False}
    assert read_only >= {("list",), ("status",), ("verify",), ("checkpoint", "list")}, read_only


def test_replica_serve_takes_the_lock_for_a_receive_only(monkeypatch):
    from fabricctl.commands import replica_serve
    from fabricctl.main import build_parser, changes, holds_node_lock

    # anything but a reading (state) is a change: recorded in the journal, refused or not (issue 26, item 2)
    for request, mutating in (("state tank/datasets/x", False), ("receive tank/datasets/x - storage1", True),
                              ("", True), ("id; sh", True), ("unbalanced 'quote", True)):
        monkeypatch.setenv("SSH_ORIGINAL_COMMAND", request)
        args = build_parser().parse_args(["replica-serve", "--peer", "storage1"])
        assert changes(replica_serve, args) is mutating
        assert holds_node_lock(replica_serve, args) is False  # only an export takes the node lock


def test_a_change_holds_the_node_lock_while_it_runs(fab, monkeypatch, node_lock_in_tmp):
    seen = []
    replace_run(monkeypatch, publish, lambda ctx, args: (seen.append(json.loads(Path(node_lock_in_tmp).read_text())),
                                                          0)[1])
    assert fab("publish", "imagenet@v1", "--to", "gpu_nodes") == 0
    assert seen[0]["command"] == "fabricctl publish imagenet@v1 --to gpu_nodes"
    assert Path(node_lock_in_tmp).read_text() == ""  # released


# which command takes which lock (fabric_core.base.lock's table): the volume's lock (shared or exclusive), a sub-lock,
# and the node lock for the whole run ("whole") or only around short sections ("sections"); no lock in a dry run
LOCK_TABLE = {
    ("dataset", "create"): ([("dataset", "x", False)], "whole"),
    ("dataset", "destroy"): ([("dataset", "x", False)], "whole"),
    ("dataset", "ingest"): ([("dataset", "x", True), ("staging", "x", False)], "sections"),
    ("dataset", "seal"): ([("dataset", "x", True), ("staging", "x", False)], "sections"),
    ("publish",): ([], "whole"),
    ("unpublish",): ([], "whole"),
    ("grant",): ([], "whole"),
    ("revoke",): ([], "whole"),
    ("access", "sync"): ([], "whole"),
    ("rotate",): ([], "whole"),
    ("replicate",): ([("dataset", "x", True)], "sections"),
    ("checkpoint", "replicate"): ([("checkpoint", "x", True)], "sections"),
    ("checkpoint", "snapshot"): ([("checkpoint", "x", True), ("writer", "x", False)], "sections"),
    ("checkpoint", "volume", "create"): ([("checkpoint", "x", False)], "whole"),
    ("checkpoint", "volume", "destroy"): ([("checkpoint", "x", False)], "whole"),
    ("checkpoint", "rollback"): ([("checkpoint", "x", False)], "whole"),
    ("checkpoint", "restore"): ([("checkpoint", "x", True)], "whole"),
    ("verify",): ([("dataset", "x", True)], "none"),
    ("diff",): ([("dataset", "x", True)], "none"),
    ("tag",): ([("dataset", "x", True)], "whole"),
    ("untag",): ([("dataset", "x", True)], "whole"),
}
LOCK_ARGV = {("dataset", "destroy"): ["x"], ("publish",): ["x@v1", "--to", "gpu1"], ("unpublish",): ["x@v1"],
             ("grant",): ["x@v1", "--to", "gpu1"], ("revoke",): ["x@v1", "--from", "gpu1"],
             ("replicate",): ["x@v1", "--to", "storage2"], ("checkpoint", "replicate"): ["x", "--to", "storage2"],
             ("checkpoint", "snapshot"): ["x", "--step", "1"],
             ("checkpoint", "volume", "create"): ["x", "--size", "1G", "--writer", "gpu1"],
             ("checkpoint", "volume", "destroy"): ["x"], ("checkpoint", "rollback"): ["x", "--step", "1"],
             ("checkpoint", "restore"): ["x", "--step", "1", "--to", "gpu1"], ("verify",): ["x@v1"],
             ("dataset", "create"): ["x", "--size", "1G"], ("dataset", "ingest"): ["x", "/src"],
             ("dataset", "seal"): ["x", "v1"], ("access", "sync"): [], ("rotate",): [], ("diff",): ["x@v1", "x@v2"],
             ("tag",): ["x@v1", "prod"], ("untag",): ["x", "prod"]}


def test_every_command_takes_the_locks_of_the_table(cfg, monkeypatch):
    from fabricctl.context import Context
    from fabricctl.main import changes, holds_node_lock, object_locks

    by_path = {m.PATH: m for m in commands.ALL}
    for path, (objects, node) in LOCK_TABLE.items():
        module = by_path[path]
        args = build_parser().parse_args(["--config", cfg, *path, *LOCK_ARGV[path]])
        ctx = Context(args)
        got_node = ("whole" if holds_node_lock(module, args) else "sections") if module.MUTATING else "none"
        assert (object_locks(ctx, module, args), got_node) == (objects, node), path
        assert changes(module, args) is bool(module.MUTATING)
        if module.MUTATING:  # a dry run takes no lock
            dry = build_parser().parse_args(["--config", cfg, *path, *LOCK_ARGV[path], "--dry-run"])
            assert object_locks(Context(dry), module, dry) == [] and not changes(module, dry), path
    # every command that locks anything is in the table (replica-serve: by its request, the next test)
    locking = {m.PATH for m in commands.ALL if getattr(m, "OBJECT_LOCKS", None) or m.MUTATING is True}
    assert locking - set(LOCK_TABLE) == BY_REQUEST


def test_a_receive_holds_its_volumes_lock_and_an_export_the_node_lock(cfg, monkeypatch):
    from fabricctl.commands import replica_serve
    from fabricctl.context import Context
    from fabricctl.main import holds_node_lock, object_locks

    for request, objects, node in (
            ("receive tank/datasets/imagenet - storage1", [("dataset", "imagenet", False)], False),
            ("receive tank/checkpoints/llama step-1 storage1", [("checkpoint", "llama", False)], False),
            ("export tank/datasets/imagenet v1 123 gpu1", [], True),
            ("state tank/datasets/imagenet", [], False)):
        monkeypatch.setenv("SSH_ORIGINAL_COMMAND", request)
        args = build_parser().parse_args(["--config", cfg, "replica-serve"])
        assert object_locks(Context(args), replica_serve, args) == objects, request
        assert holds_node_lock(replica_serve, args) is node, request


TRY_LOCK = "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)"


def free_in_another_process(path) -> bool:
    """Whether another process gets the lock file at once (a non-blocking exclusive flock)."""
    return subprocess.run([sys.executable, "-c", TRY_LOCK, str(path)], capture_output=True).returncode == 0


def test_a_long_ingest_leaves_the_node_lock_free_and_holds_only_its_datasets_locks(fab, monkeypatch,
                                                                                  node_lock_in_tmp):
    """While the (fake) long copy runs, another process gets the node lock at once (a publish, a grant go on) and
    the other dataset's lock, not this dataset's staging lock; the node lock is held only around the mount."""
    seen = {}
    locks = Path(node_lock_in_tmp).parent / "locks"

    def long_ingest(ctx, args):
        with ctx.node_lock():  # the staging mount
            seen["mount"] = free_in_another_process(node_lock_in_tmp)
        Path(locks / "dataset-other.lock").touch()
        seen["copy"] = (free_in_another_process(node_lock_in_tmp), free_in_another_process(
            locks / "staging-imagenet.lock"), free_in_another_process(locks / "dataset-other.lock"))
        return 0

    replace_run(monkeypatch, dataset_ingest, long_ingest)
    assert fab("dataset", "ingest", "imagenet", "/src") == 0
    assert seen == {"mount": False, "copy": (True, False, True)}
    assert free_in_another_process(locks / "staging-imagenet.lock")  # released at the end


def test_a_checkpoint_snapshot_goes_on_while_a_replicate_of_its_job_runs(fab, monkeypatch, node_lock_in_tmp):
    """A replicate holds its job's lock shared for hours; a snapshot of that job (shared, and the writer's lock)
    runs meanwhile, with no node lock; a rollback (exclusive) waits and gives up, naming the replicate."""
    from fabric_core.base import lock as core_lock

    ran = replace_run(monkeypatch, checkpoint_snapshot, ok)
    rollbacks = replace_run(monkeypatch, checkpoint_rollback, ok)
    with held_elsewhere(lambda: core_lock.object_lock("checkpoint", "llama", "fabricctl checkpoint replicate llama "
                                                      "--to storage2", shared=True)), \
            held_elsewhere(lambda: node_lock("fabricctl publish imagenet@v1 --to gpu_nodes")):
        assert fab("checkpoint", "snapshot", "llama", "--step", "7") == 0
        assert fab("checkpoint", "rollback", "llama", "--step", "1") == 4
    assert len(ran) == 1 and rollbacks == []


def test_a_held_lock_is_status_4_names_the_holder_and_the_command_never_runs(fab, records, monkeypatch, capsys):
    calls = replace_run(monkeypatch, rotate, ok)
    with node_lock("ansible fabric_zpool tank") as holder:
        assert fab("rotate") == 4
    assert calls == []
    err = capsys.readouterr().err
    assert (f"fabricctl: error: another fabric command is running: ansible fabric_zpool tank, pid {holder['pid']}, "
            f"since {holder['since']}") in err
    assert "fix: wait for it to end" in err
    (rec,) = records
    assert (rec["FABRIC_COMMAND"], rec["FABRIC_RESULT"], rec["FABRIC_EXIT_STATUS"], rec["FABRIC_ERROR"]) == (
        "rotate", "refused", "4", "LockHeld")


def test_a_change_waits_as_long_as_the_config_says_telling_what_it_waits_for(cfg, monkeypatch, capsys):
    Path(cfg).write_text(CONFIG.replace("wait_seconds: 0", "wait_seconds: 30"))
    calls = replace_run(monkeypatch, rotate, ok)  # a checkpoint snapshot no longer takes the node lock
    held, release = threading.Event(), threading.Event()

    def holder():
        with node_lock("fabricctl checkpoint snapshot llama@step-100"):
            held.set()
            release.wait(20)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(10)
    threading.Timer(0.5, release.set).start()
    assert main(["--config", cfg, "rotate"], sink=lambda f: None) == 0
    thread.join(10)
    assert len(calls) == 1
    assert "waiting up to 30 s for this node's lock, held by fabricctl checkpoint snapshot llama@step-100, pid" in \
        capsys.readouterr().err


@pytest.mark.parametrize("module, argv", [
    (list_versions, ["list"]),
    (status, ["status"]),
    (verify, ["verify", "imagenet@v1"]),
    (publish, ["publish", "imagenet@v1", "--to", "gpu1", "--dry-run"]),
    (rotate, ["rotate", "--dry-run", "--explain"]),
    (checkpoint_snapshot, ["checkpoint", "snapshot", "llama", "--step", "1", "--dry-run"]),
])
def test_reads_and_dry_runs_take_no_lock_and_log_nothing(fab, records, monkeypatch, module, argv):
    calls = replace_run(monkeypatch, module, ok)
    with held_elsewhere(lambda: node_lock("fabricctl publish imagenet@v2 --to gpu_nodes")):  # a change: exit 4
        assert fab(*argv) == 0
    assert len(calls) == 1 and records == []


@contextlib.contextmanager
def held_elsewhere(make):
    """Hold the lock ``make()`` opens in another thread (as another process would) for the ``with`` block."""
    held, release = threading.Event(), threading.Event()

    def holder():
        with make():
            held.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(10)
    try:
        yield
    finally:
        release.set()
        thread.join(10)


def test_the_obsolete_rotation_lock_file_is_warned_about(cfg, monkeypatch, capsys):
    Path(cfg).write_text(CONFIG + "rotation: {lock_file: /run/fabricctl-rotate.lock}\n")
    replace_run(monkeypatch, status, lambda ctx, args: (ctx.config, 0)[1])
    assert main(["--config", cfg, "status"]) == 0
    assert "fabricctl: warning: " in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# the sinks


def test_a_failing_sink_never_changes_the_outcome(fab, monkeypatch, cfg, capsys):
    replace_run(monkeypatch, publish, ok)

    def broken(fields):
        raise OSError("journal socket gone")

    assert main(["--config", cfg, "publish", "imagenet@v1", "--to", "gpu1"], sink=broken) == 0
    assert "could not log the command to the journal" in capsys.readouterr().err


def test_the_journal_binding_is_used_when_present(monkeypatch):
    sent = []
    journal = types.ModuleType("systemd.journal")
    journal.send = lambda **fields: sent.append(fields)
    systemd = types.ModuleType("systemd")
    systemd.journal = journal
    monkeypatch.setitem(sys.modules, "systemd", systemd)
    monkeypatch.setitem(sys.modules, "systemd.journal", journal)
    assert audit.default_sink() is audit.journal_sink
    rec = audit.Record("publish", "imagenet@v1", 0, 2.5, ["gpu1"])
    audit.emit(rec)
    assert sent == [rec.fields()] and sent[0]["SYSLOG_IDENTIFIER"] == "fabricctl"


def test_syslog_is_the_fallback_without_the_binding(monkeypatch):
    monkeypatch.setitem(sys.modules, "systemd", None)  # `from systemd import journal` raises ImportError
    assert audit.default_sink() is audit.syslog_sink
    import syslog

    calls = []
    monkeypatch.setattr(syslog, "openlog", lambda *a, **k: calls.append(("openlog", a)))
    monkeypatch.setattr(syslog, "syslog", lambda *a: calls.append(("syslog", a)))
    monkeypatch.setattr(syslog, "closelog", lambda: calls.append(("closelog", ())))
    audit.emit(audit.Record("rotate", "-", 3, 1.0, ["gpu1", "gpu2"], ["gpu2"], error="PartialFailure"))
    assert [c[0] for c in calls] == ["openlog", "syslog", "closelog"]
    assert calls[0][1][0] == "fabricctl"
    priority, message = calls[1][1]
    assert priority == 4
    assert message.startswith("rotate -: partial (exit 3) in 1.0 s; hosts gpu1,gpu2; failed on gpu2; PartialFailure [")
    assert "fabric_exit_status=3" in message and "fabric_hosts_failed=gpu2" in message


# --------------------------------------------------------------------------------------------
# --version


def test_version_lists_fabricctl_and_what_it_finds(monkeypatch, capsys):
    monkeypatch.setattr(about, "fabricctl_version", lambda: "1.2.3")
    monkeypatch.setattr(about, "PROBES", (("zfs", lambda: "zfs-2.1.11-1"), ("rtslib-fb", lambda: None),
                                          ("open-iscsi", lambda: 1 / 0)))
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == ("fabricctl 1.2.3\nzfs: zfs-2.1.11-1\nrtslib-fb: not found\n"
                                       "open-iscsi: not found\n")


def test_fabricctl_version_from_the_distribution_else_the_package():
    from fabricctl import __version__

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    assert about.fabricctl_version(lambda name: {"gpu-storage-fabric": "9.9.9"}[name]) == "9.9.9"
    assert about.fabricctl_version(missing) == __version__


def test_zfs_version_from_the_command_else_the_module():
    asked = []

    def run(argv):
        asked.append(argv)
        return "zfs-2.1.11-1\nzfs-kmod-2.1.11-1"

    assert about.zfs_version(run, lambda path: pytest.fail("read although zfs answered")) == "zfs-2.1.11-1"
    assert asked == [["zfs", "version"]]
    read = {"/sys/module/zfs/version": "2.2.2-1\n"}.get
    assert about.zfs_version(lambda argv: None, read) == "zfs-kmod-2.2.2-1 (kernel module)"
    assert about.zfs_version(lambda argv: None, lambda path: None) is None


def test_rtslib_version_from_metadata_else_the_module():
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    module = types.SimpleNamespace(__version__="2.1.74")
    assert about.rtslib_version(lambda name: {"rtslib-fb": "2.1.75"}[name], lambda name: module) == "2.1.75"
    assert about.rtslib_version(missing, lambda name: module) == "2.1.74"

    def no_module(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    assert about.rtslib_version(lambda name: "2.1.75", no_module) is None  # metadata left behind: not importable


def test_a_python_module_missing_broken_or_without_a_version():
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    def no_package(name):  # `import systemd.journal` without the systemd package
        raise ModuleNotFoundError("No module named 'systemd'", name="systemd")

    assert about.module_version("systemd-python", "systemd.journal", missing, no_package) is None

    def no_dependency(name):  # the module is there, one of its own imports is not
        raise ModuleNotFoundError("No module named '_cffi_backend'", name="_cffi_backend")

    assert about.module_version("pyzfs", "libzfs_core", missing, no_dependency) == (
        "installed, but does not import: No module named '_cffi_backend'")

    def broken(name):
        raise OSError("libzfs_core.so.3: cannot open shared object file")

    assert about.module_version("pyzfs", "libzfs_core", missing, broken) == (
        "installed, but does not import: OSError: libzfs_core.so.3: cannot open shared object file")
    assert about.module_version("pyzfs", "libzfs_core", missing, lambda name: types.SimpleNamespace()) == (
        "installed (version unknown)")
    assert about.module_version("PyYAML", "yaml") == importlib.metadata.version("PyYAML")  # the real one


def test_version_names_the_debian_package_of_a_missing_module(monkeypatch, capsys):
    """The real probes of fabricctl's Python modules, one of them for a module that is not installed."""
    monkeypatch.setattr(about, "fabricctl_version", lambda: "1.2.3")
    requirements = (*about.REQUIREMENTS[-1:],
                    ("libzfs_core", "fabric-test-no-such-dist", "fabric_test_no_such_module", "python3-pyzfs", "zfs"))
    monkeypatch.setattr(about, "PROBES", tuple((label, about._module_probe(dist, module), package)
                                               for label, dist, module, package, _extra in requirements))
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == (f"fabricctl 1.2.3\nPyYAML: {importlib.metadata.version('PyYAML')}\n"
                                       "libzfs_core: not found (Debian package python3-pyzfs)\n")


def test_version_probes_every_module_fabricctl_imports_and_pyproject_declares_them():
    """Each module of about.REQUIREMENTS is probed by --version, and pyproject.toml declares its distribution: as
    a dependency (pip checks it when the role installs the wheel) or in its extra (and in the extra `node`)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    labels = [label for label, *_rest in about.PROBES]
    assert labels == ["zfs", "open-iscsi", *(label for label, *_rest in about.REQUIREMENTS)]
    declared = sorted(dist for _label, dist, _module, _package, extra in about.REQUIREMENTS if extra is None)
    assert sorted(project["dependencies"]) == declared
    for _label, dist, _module, _package, extra in about.REQUIREMENTS:
        if extra is not None:
            assert [req for req in extras[extra] if req.split(">")[0].split("=")[0] == dist], (dist, extra)
    wanted = sorted({extra for *_rest, extra in about.REQUIREMENTS if extra})
    assert extras["node"] == [f"{project['name']}[{','.join(extras_order(wanted, extras))}]"]
    # the Debian packages the fabricctl role installs, or its preflight's storage roles do
    debian = {package for *_rest, package, _extra in about.REQUIREMENTS}
    roles = "".join((REPO / "roles" / role / "defaults" / "main.yml").read_text()
                    for role in ("fabricctl", "storage_base", "lio_target"))
    assert all(package in roles for package in debian), debian


def extras_order(wanted, extras):
    """The extras in pyproject.toml's order (the `node` extra lists them so)."""
    return [name for name in extras if name in wanted]


def test_iscsi_version_and_a_missing_tool():
    assert about.iscsi_version(lambda argv: "iscsiadm version 2.1.8\n") == "iscsiadm version 2.1.8"
    assert about.iscsi_version(lambda argv: None) is None
    assert about._run(["/nonexistent/fabric-test-tool", "--version"]) is None
    assert about._run([sys.executable, "-c", "import sys; sys.exit(3)"]) is None
    assert about._run([sys.executable, "-c", "print('v1')"]) == "v1"


def test_the_record_lists_hosts_in_the_fan_outs_order_whatever_order_they_were_reached_in():
    from fabricctl.config import Host
    from fabricctl.context import Context
    from fabricctl.fanout import run_on_hosts

    hosts = [Host(f"gpu{i}", f"10.77.0.{20 + i}", f"iqn.2026-11.io.fabric.lab:gpu{i}") for i in (1, 2, 3)]
    ctx = Context(build_parser().parse_args(["publish", "imagenet@v1", "--to", "gpu_nodes"]))
    ctx.hosts.update({"gpu3": "contacted", "gpu1": "contacted", "writer": "contacted"})  # as threads reached them

    def one(host):
        if host.name == "gpu2":
            raise UserError("no route to host")

    ctx.record_outcomes(run_on_hosts(hosts, one))
    rec = audit.record(ctx.args, ctx.hosts, 3, 1.0, "PartialFailure")
    assert rec.hosts == ["writer", "gpu1", "gpu2", "gpu3"] and rec.hosts_failed == ["gpu2"]


@pytest.mark.parametrize("quiet", [False, True], ids=["progress shown", "--json (no progress)"])
def test_a_fan_outs_step_is_where_a_host_stops_after_ctrl_c(cfg, quiet):
    """``step(text)`` of ``Context.fan`` is a step boundary with or without the progress display: after Ctrl-C a
    host finishes the step it is in and stops at its next one (fanout.checkpoint), never inside a step."""
    import signal
    import time

    from fabricctl.context import Context

    ctx = Context(build_parser().parse_args(["--config", cfg, "publish", "imagenet@v1", "--to", "gpu_nodes"]))
    hosts = ctx.config.resolve_targets("gpu_nodes")
    main_thread, reached = threading.main_thread().ident, []

    def one(host, step):
        step("attach")
        if host is hosts[0]:
            signal.pthread_kill(main_thread, signal.SIGINT)  # Ctrl-C while the first host attaches
        time.sleep(0.5)  # the rest of the step: not cut short
        step("current")  # the boundary: Interrupted here
        reached.append(host.name)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as exc:
            ctx.fan(hosts, one, "publish", quiet=quiet)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert reached == []
    assert {o.status for o in exc.value.fanout_result.outcomes} <= {"interrupted", "skipped"}


# --------------------------------------------------------------------------------------------
# one command imported per run


def test_every_command_line_finds_its_module_alone():
    from fabricctl.main import command_words

    for module in commands.ALL:
        words = [*module.PATH, "arg"]
        assert commands.matching(command_words(words)) is module
        assert commands.matching(command_words(["--config", "/x.yml", *module.PATH, "--json"])) is module
        assert commands.matching(command_words(["--config=/x.yml", *module.PATH, "-x", "y"])) is module
    for words in (["dataset"], ["checkpoint", "volume"], ["nosuch"], [], ["--help"], ["plan"]):
        assert commands.matching(command_words(words)) is None, words  # a group or nothing: the whole tree


def test_a_command_parsed_alone_parses_as_in_the_whole_tree(capsys):
    for module in commands.ALL:
        for parser in (build_parser(module), build_parser()):
            with pytest.raises(SystemExit):
                parser.parse_args([*module.PATH, "--help"])
        alone, whole = capsys.readouterr().out.split("usage: ")[1:]
        assert alone == whole, module.PATH


def test_a_run_imports_only_its_command(tmp_path):
    code = ("import sys\nfrom fabricctl.main import main\nmain(['plan', 'checkpoint', '--params', '7e9', "
            "'--interval', '1h', '--json'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('fabricctl.commands.')), file=sys.stderr)")
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr.strip().splitlines()[-1] == "['fabricctl.commands.plan_checkpoint']"
