"""library/fabric_zfs_dataset.py as data: cases in tests/unit/data/module_zfs_dataset.yaml (recorded outputs)."""

from __future__ import annotations

import json
from unittest import mock

import pytest
import yaml
from support import DATA, ScriptedRunner, data, run_module  # (support puts module_utils on sys.path)

# isort: split
from ansible.module_utils import basic

SPEC = yaml.safe_load((DATA / "module_zfs_dataset.yaml").read_text())


def script_of(case: dict) -> list:
    steps = []
    for step in case.get("commands", []):
        steps.append({"command": [str(a) for a in step["command"]], "rc": step.get("rc", 0),
                      "stdout": data(step["stdout_file"]) if "stdout_file" in step else step.get("stdout", ""),
                      "stderr": data(step["stderr_file"]) if "stderr_file" in step else step.get("stderr", "")})
    return steps


@pytest.mark.parametrize("case", SPEC["cases"], ids=[c["name"] for c in SPEC["cases"]])
def test_fabric_zfs_dataset(case, monkeypatch):
    stdin = []
    original = ScriptedRunner._run

    def recording(self, argv, data=None):
        stdin.append(data)
        return original(self, argv, data)

    monkeypatch.setattr(ScriptedRunner, "_run", recording)
    warned: list = []
    warn = mock.patch.object(basic.AnsibleModule, "warn", lambda self, msg: warned.append(msg))
    result = run_module("fabric_zfs_dataset", case["args"], script_of(case), check_mode=case.get("check_mode", False),
                        diff=case.get("diff", False), extra_patches=[warn])
    result["warnings"] = warned  # Ansible adds module.warn messages to the result as `warnings`
    assert result.get("failed", False) == case.get("failed", False), result
    for words in case.get("msg", []):
        assert words in result["msg"]
    for key, value in case.get("expect", {}).items():
        assert result[key] == value, key
    if "prepared_starts" in case:
        assert result["prepared"].startswith(case["prepared_starts"])
    if "stdin" in case:
        assert stdin == case["stdin"]
    if "secret" in case:
        # the key reaches zfs on stdin only: never in argv, never in the result
        assert all(case["secret"] not in " ".join(argv) for argv in result["_commands"])
        assert case["secret"] not in json.dumps({k: v for k, v in result.items() if k != "invocation"})
    if case.get("diff") and not result.get("failed"):
        assert set(result["diff"]) == {"before", "after", "before_header", "after_header"}
    elif not case.get("diff"):
        assert "diff" not in result
