"""Shared unit-test helpers: a scripted command runner and an in-process Ansible module runner.

Module tests are data: each case lists the module input, the exact commands the module must run
(with the recorded rc/stdout/stderr they get back) and the expected result. ``run_module`` runs
the module in-process with ``AnsibleModule.run_command`` replaced by the script, and checks
that every scripted command was consumed, in order.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"

sys.path.insert(0, str(REPO / "module_utils"))  # `import fabric_core`

import ansible.module_utils  # noqa: E402

if str(REPO / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(REPO / "module_utils"))  # `ansible.module_utils.fabric_core`

from ansible.module_utils import basic  # noqa: E402
from ansible.module_utils.testing import patch_module_args  # noqa: E402
from fabric_core.runner import Runner  # noqa: E402


def data(*parts: str) -> str:
    """The text of a recorded output file under tests/unit/data/."""
    return DATA.joinpath(*parts).read_text()


def script_of(case: dict) -> list[dict]:
    """A YAML case's `commands` as a ScriptedRunner script; `stdout_file`/`stderr_file` name
    recorded outputs under tests/unit/data/."""
    return [{"command": [str(a) for a in step["command"]], "rc": step.get("rc", 0),
             "stdout": data(step["stdout_file"]) if "stdout_file" in step else step.get("stdout", ""),
             "stderr": data(step["stderr_file"]) if "stderr_file" in step else step.get("stderr", "")}
            for step in case.get("commands", [])]


class ScriptedRunner(Runner):
    """A Runner that expects exactly the scripted commands, in order, and returns their output.

    script: list of {"command": [argv...], "rc": 0, "stdout": "", "stderr": ""}.
    """

    def __init__(self, script: list[dict], dry_run: bool = False):
        super().__init__(dry_run=dry_run)
        self.script = list(script)
        self.calls: list[list[str]] = []

    def _run(self, argv, data):
        self.calls.append(list(argv))
        assert self.script, f"unexpected command (script exhausted): {list(argv)}"
        step = self.script.pop(0)
        assert list(argv) == [str(a) for a in step["command"]], \
            f"command mismatch:\n  expected {step['command']}\n  got      {list(argv)}"
        return step.get("rc", 0), step.get("stdout", ""), step.get("stderr", "")

    def assert_done(self) -> None:
        assert not self.script, f"commands expected but not run: {[s['command'] for s in self.script]}"


class _Exit(Exception):
    def __init__(self, result: dict):
        self.result = result


def load_module(name: str):
    """Import library/<name>.py as a Python module."""
    path = REPO / "library" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_fabric_test_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_module(name: str, args: dict, script: list[dict] | None = None, *, check_mode: bool = False,
               diff: bool = False, extra_patches: list | None = None) -> dict:
    """Run library/<name>.py in-process; return its result dict with `failed` set on fail_json.

    Every command goes through the script (see ScriptedRunner); leftover scripted commands fail.
    Messages given to ``module.warn`` come back as ``warnings``, as Ansible reports them.
    """
    module = load_module(name)
    runner = ScriptedRunner(script or [])
    warnings: list[str] = []
    full_args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)

    def exit_json(self, **kwargs):
        kwargs.setdefault("changed", False)
        raise _Exit(kwargs)

    def fail_json(self, msg, **kwargs):
        kwargs["failed"] = True
        kwargs["msg"] = msg
        raise _Exit(kwargs)

    def run_command(self, args, **kwargs):
        return runner._run(args, kwargs.get("data"))

    patches = [
        mock.patch.object(basic.AnsibleModule, "exit_json", exit_json),
        mock.patch.object(basic.AnsibleModule, "fail_json", fail_json),
        mock.patch.object(basic.AnsibleModule, "run_command", run_command),
        mock.patch.object(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: f"/usr/sbin/{name}"),
        mock.patch.object(basic.AnsibleModule, "warn", lambda self, msg, **kw: warnings.append(msg)),
        *(extra_patches or []),
    ]
    with patch_module_args(full_args):
        for p in patches:
            p.start()
        try:
            module.main()
        except _Exit as exc:
            result = exc.result
        else:
            raise AssertionError("module returned without exit_json/fail_json")
        finally:
            for p in reversed(patches):
                p.stop()
    runner.assert_done()
    result["_commands"] = runner.calls
    result["warnings"] = warnings
    return json.loads(json.dumps(result, default=str))


def run_case(name: str, case: dict, *, extra_patches: list | None = None) -> dict:
    """Run library/<name>.py on one YAML case and check what every module's cases declare alike:
    `failed`, words of `msg`, exact `expect` values and `prepared_starts`. Returns the result for the
    module's own checks."""
    result = run_module(name, case["args"], script_of(case), check_mode=case.get("check_mode", False),
                        diff=case.get("diff", False), extra_patches=extra_patches)
    assert result.get("failed", False) == case.get("failed", False), result
    for words in case.get("msg", []):
        assert words in result["msg"]
    for key, value in case.get("expect", {}).items():
        assert result[key] == value, key
    if "prepared_starts" in case:
        assert result["prepared"].startswith(case["prepared_starts"])
    return result
