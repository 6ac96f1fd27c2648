"""Failures under --json (issue 32): every command that takes --json, when it fails, prints exactly one JSON object
on stdout with the problem ("error"), the fix, the exit status and the error's class, whatever ended it (a typed
error, a partial failure after the command made its result, a lock held, a bug, Ctrl-C, a usage error); the text
for people stays on stderr, and without --json stdout stays empty. One place does it (fabricctl/main.py's ``fail``
and output.failure), so the tests run every command through ``main`` with its ``run`` replaced. Also --debug /
FABRICCTL_DEBUG (tracebacks) and -v (each command run, secrets masked)."""

from __future__ import annotations

import json
import sys

import pytest
from fabric_core.base.errors import CommandError, LockHeld, NotFound, UserError
from fabric_core.base.runner import LocalRunner
from support import fabricctl_config

from fabricctl import commands
from fabricctl.errors import PartialFailure
from fabricctl.main import build_parser, main
from fabricctl.tree import walk

FIX = "do the right thing"


@pytest.fixture
def cfg(tmp_path) -> str:
    path = tmp_path / "config.yml"
    path.write_text(fabricctl_config() + "lock: {wait_seconds: 0}\n")
    return str(path)


def minimal_argv(node) -> list[str]:
    """A command line that parses for the command of ``node`` (fabricctl.tree): its words, then a value for each
    positional and each required option (its first choice, a version for NAME@VERSION, else "1", which every
    other type here accepts; the locks a command declares read its positionals before it runs)."""
    def value(opt) -> str:
        return opt.choices[0] if opt.choices else "imagenet@v1" if "@" in opt.metavar else "1"

    argv = list(node.path)
    for opt in node.options:
        if opt.positional:
            argv.append(value(opt))
        elif opt.required:
            argv += [opt.flags[-1], value(opt)]
    return argv


def json_commands() -> list:
    return [n for n in walk(build_parser()) if n.module is not None and any("--json" in o.flags for o in n.options)]


def replace_run(monkeypatch, module, fn) -> None:
    monkeypatch.setattr(module, "run", fn)


def raising(exc: BaseException):
    def run(ctx, args):
        raise exc
    return run


def one_object(text: str) -> dict:
    """stdout holds exactly one JSON object (json.loads fails on anything after it)."""
    doc = json.loads(text)
    assert isinstance(doc, dict)
    return doc


def test_every_json_command_is_covered():
    names = {n.module.__name__.rsplit(".", 1)[1] for n in json_commands()}
    assert names == set(commands.NAMES)  # every command takes --json


@pytest.mark.parametrize("node", json_commands(), ids=lambda n: n.name)
def test_every_command_fails_as_one_json_object(node, cfg, monkeypatch, capsys):
    replace_run(monkeypatch, node.module, raising(NotFound("imagenet@v9 does not exist", FIX)))
    argv = ["--config", cfg, *minimal_argv(node)]
    assert main([*argv, "--json"], sink=lambda f: None) == 1
    out, err = capsys.readouterr()
    assert one_object(out) == {"error": "imagenet@v9 does not exist", "fix": FIX, "exit_status": 1,
                               "error_type": "NotFound"}
    assert "fabricctl: error: imagenet@v9 does not exist\n  fix: do the right thing" in err  # the text, as before
    assert main(argv, sink=lambda f: None) == 1
    out, err = capsys.readouterr()
    assert out == "" and "fabricctl: error: imagenet@v9 does not exist" in err  # without --json: no JSON


@pytest.mark.parametrize("exc, status, kind, problem, fix", [
    (UserError("bad name", FIX), 1, "UserError", "bad name", FIX),
    (LockHeld("another fabric command is running: x", "wait"), 4, "LockHeld", "another fabric command is running: x",
     "wait"),
    (CommandError(["zfs", "destroy", "tank/x"], 1, stderr="dataset is busy"), 5, "CommandError",
     "`zfs destroy tank/x` failed with exit 1: dataset is busy", ""),
    (RuntimeError("a bug"), 5, "RuntimeError", "unexpected error: RuntimeError('a bug')", "--debug"),
    (KeyboardInterrupt(), 130, "KeyboardInterrupt", "interrupted; the fabric is consistent", "re-run the command"),
], ids=["user", "lock", "command", "bug", "ctrl-c"])
def test_each_way_of_failing_has_its_status_in_the_object(exc, status, kind, problem, fix, cfg, monkeypatch, capsys):
    monkeypatch.delenv("FABRICCTL_DEBUG", raising=False)
    from fabricctl.commands import publish

    replace_run(monkeypatch, publish, raising(exc))
    records: list = []
    assert main(["--config", cfg, "publish", "imagenet@v1", "--to", "gpu_nodes", "--json"],
                sink=records.append) == status
    out, err = capsys.readouterr()
    doc = one_object(out)
    assert (doc["exit_status"], doc["error_type"], doc["error"]) == (status, kind, problem)
    assert fix in doc["fix"] and set(doc) == {"error", "fix", "exit_status", "error_type"}
    assert err.startswith("fabricctl: ")
    assert [r["FABRIC_EXIT_STATUS"] for r in records] == [str(status)]  # the journal record as before


def test_a_result_made_before_the_failure_carries_it(cfg, monkeypatch, capsys):
    """A partial publish (its result, then exit 3) and a verify that found differences (its report, then exit 1):
    one object, the result with the failure's keys added."""
    from fabricctl.commands import publish, verify

    def partial(ctx, args):
        ctx.emit({"ref": "imagenet@v1", "hosts": {"gpu1": {"status": "ok"}, "gpu2": {"status": "failed"}}})
        raise PartialFailure("publish imagenet@v1 failed on 1 of 2 hosts:\n  gpu2: no route to host", "re-run it")

    def differs(ctx, args):
        ctx.emit({"ok": False, "missing": ["a.bin"], "ref": "imagenet@v1"})
        raise verify.VerifyFailed("imagenet@v1 on the storage node differs from its manifest", "see the differences")

    replace_run(monkeypatch, publish, partial)
    replace_run(monkeypatch, verify, differs)
    assert main(["--config", cfg, "publish", "imagenet@v1", "--to", "gpu_nodes", "--json"], sink=lambda f: None) == 3
    doc = one_object(capsys.readouterr().out)
    assert doc["hosts"]["gpu2"] == {"status": "failed"} and doc["exit_status"] == 3
    assert doc["error_type"] == "PartialFailure" and doc["error"].startswith("publish imagenet@v1 failed on 1 of 2")
    assert main(["--config", cfg, "verify", "imagenet@v1", "--json"]) == 1
    doc = one_object(capsys.readouterr().out)
    assert doc["missing"] == ["a.bin"] and (doc["exit_status"], doc["error_type"]) == (1, "VerifyFailed")
    # and a success prints the result alone, once
    replace_run(monkeypatch, verify, lambda ctx, args: (ctx.emit({"ok": True}), 0)[1])
    assert main(["--config", cfg, "verify", "imagenet@v1", "--json"]) == 0
    assert one_object(capsys.readouterr().out) == {"ok": True}


def test_a_real_command_failing_on_its_input(cfg, capsys):
    """The real verify, an unknown host: no run replaced."""
    assert main(["--config", cfg, "verify", "imagenet@v1", "--on", "gpu7", "--json"]) == 1
    doc = one_object(capsys.readouterr().out)
    assert doc["error_type"] == "NotFound" and "gpu7" in doc["error"] and doc["exit_status"] == 1


@pytest.mark.parametrize("argv, message", [
    (["publish", "imagenet@v1", "--json"], "the following arguments are required: --to"),
    (["publish", "imagenet@v1", "--to", "gpu1", "--bogus", "--json"], "unrecognized arguments: --bogus"),
    (["no-such-command", "--json"], "invalid choice: 'no-such-command'"),
    (["checkpoint", "--json"], "unrecognized arguments: --json"),
    (["plan", "checkpoint", "--params", "7B", "--json"], "the following arguments are required: --interval"),
])
def test_usage_errors_under_json_are_one_object_with_status_2(argv, message, cfg, capsys):
    assert main(["--config", cfg, *argv]) == 2
    out, err = capsys.readouterr()
    doc = one_object(out)
    assert doc["exit_status"] == 2 and doc["error_type"] == "UsageError" and message in doc["error"]
    assert "--help" in doc["fix"] and "usage: " in err and message in err  # argparse's text, as before
    without = [a for a in argv if a != "--json"]
    if without != argv[:1]:  # `checkpoint` alone prints its help
        assert main(["--config", cfg, *without]) == 2
        assert capsys.readouterr().out == ""


def test_json_after_a_double_dash_is_not_asked_for():
    from fabricctl.main import json_asked

    assert json_asked(["status", "--json"]) and not json_asked(["dataset", "ingest", "x", "--", "--json"])


# --------------------------------------------------------------------------------------------
# --debug, FABRICCTL_DEBUG


@pytest.mark.parametrize("how", ["option", "option-first", "environment"])
def test_debug_prints_the_traceback_and_keeps_the_status(how, cfg, monkeypatch, capsys):
    from fabricctl.commands import status

    monkeypatch.delenv("FABRICCTL_DEBUG", raising=False)
    replace_run(monkeypatch, status, raising(RuntimeError("a bug")))
    argv = ["--config", cfg, "status", "--json"]
    if how == "option":
        argv.append("--debug")
    elif how == "option-first":
        argv.insert(0, "--debug")
    else:
        monkeypatch.setenv("FABRICCTL_DEBUG", "1")
    assert main(argv) == 5
    out, err = capsys.readouterr()
    assert "Traceback (most recent call last)" in err and "RuntimeError: a bug" in err
    assert one_object(out)["exit_status"] == 5
    monkeypatch.setenv("FABRICCTL_DEBUG", "0")  # 0 or empty: off
    assert main(["--config", cfg, "status"]) == 5
    assert "Traceback" not in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# -v


def test_verbose_traces_each_command_with_secrets_masked(cfg, monkeypatch, capsys):
    from fabricctl.commands import status

    def run(ctx, args):
        ctx.local.run([sys.executable, "-c", "pass"])
        ctx.local.run(["iscsiadm", "-m", "node", "-n", "node.session.auth.password", "-v", "s3cret"], mutating=True)
        ctx.local.call(("lzc_hold", "tank/x@v1"), lambda: None)
        return 0

    real = LocalRunner._run
    monkeypatch.setattr(LocalRunner, "_run", lambda self, argv, data: (0, "", "") if argv[0] == "iscsiadm"
                        else real(self, argv, data))
    replace_run(monkeypatch, status, run)
    for argv in (["-v", "status"], ["status", "--verbose"], ["--verbose", "status"]):
        assert main(["--config", cfg, *argv]) == 0
        err = capsys.readouterr().err.splitlines()
        assert err[0].startswith(f"fabricctl: [this node] {sys.executable} -c pass: exit 0 in ")
        assert err[1].startswith("fabricctl: [this node] iscsiadm -m node -n node.session.auth.password -v ********: "
                                 "exit 0 in ")
        assert err[2].startswith("fabricctl: [this node] lzc_hold tank/x@v1: done in ")
        assert "s3cret" not in "\n".join(err)
    assert main(["--config", cfg, "status"]) == 0
    assert capsys.readouterr().err == ""  # without -v: nothing



def test_a_dry_run_traces_what_it_would_run():
    lines: list = []
    runner = LocalRunner(dry_run=True)
    runner.trace = lines.append
    runner.run(["zfs", "destroy", "tank/x"], mutating=True)
    runner.call(("lzc_release", "tank/x@v1"), lambda: pytest.fail("called in a dry run"))
    assert lines == ["zfs destroy tank/x: not run (dry run)", "lzc_release tank/x@v1: not called (dry run)"]
