"""plugins/modules/fabric_iscsi_session.py as data: tests/unit/data/iscsi/module_cases.yml (see its header)."""

from __future__ import annotations

import json

import pytest
import yaml

from support import DATA, data, run_module  # isort: skip
from fabric_core.node.iscsi import record_writer_argv  # isort: skip

CASES = yaml.safe_load((DATA / "iscsi" / "module_cases.yml").read_text())


def _script(steps: list[dict]) -> list[dict]:
    script = []
    for s in steps:
        # record_writer: [IQN, PORTAL] stands for the command that writes the secrets (data: its stdin)
        command = list(record_writer_argv(*s["record_writer"])) if "record_writer" in s else s["command"]
        step = {"command": command, "rc": s.get("rc", 0), "stdout": s.get("stdout", ""),
                "stderr": s.get("stderr", "")}
        if "data" in s:
            step["data"] = json.dumps(s["data"])
        for key in ("stdout", "stderr"):
            name = s.get(f"{key}_file")
            if name:
                text = data("iscsi", name)
                lines = text.splitlines(keepends=True)
                if lines and lines[-1].startswith("__rc="):
                    text = "".join(lines[:-1])
                    step["rc"] = s.get("rc", int(lines[-1].split("=")[1]))
                step[key] = text
        script.append(step)
    return script


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_module_case(case):
    script = _script(case["script"])
    result = run_module("fabric_iscsi_session", case["args"], script,
                        check_mode=case.get("check_mode", False), diff=case.get("diff", False))
    assert result["_commands"] == [[str(a) for a in s["command"]] for s in script]
    for key, value in case["expect"].items():
        assert result.get(key, False if key == "failed" else None) == value, (key, result)
    for text in case.get("msg_contains", []):
        assert text in result["msg"], result["msg"]
    dumped = json.dumps({k: v for k, v in result.items() if k != "_commands"})  # _commands: the test's own record
    for secret in case.get("result_excludes", []):
        assert secret not in dumped
    if "warnings_contain" in case:
        assert any(case["warnings_contain"] in w for w in result["warnings"]), result
    if "sessions_sids" in case:
        assert [s["sid"] for s in result["sessions"]] == case["sessions_sids"]
    for side, texts in case.get("diff_contains", {}).items():
        for text in texts:
            assert text in result["diff"][side], result["diff"]
    if case.get("diff_equal"):
        assert result["diff"]["before"] == result["diff"]["after"]
