"""plugins/modules/fabric_disk_info.py as data: tests/unit/data/module_disk_info.yaml, replayed on recorded
storage1 output.

The module only reports; the planning it used to do is fabric_zpool's (spec mode, test_module_zpool.py)."""

from __future__ import annotations

import json

import pytest
import yaml
from support import DATA, disk_state_script, load_module, run_module

BY_ID = "/dev/disk/by-id/"
CASES = yaml.safe_load((DATA / "module_disk_info.yaml").read_text())


def script(state: str) -> list[dict]:
    """The state's recorded commands (its `zpool status -j` derived for the 2.1 states: support.DERIVED_POOLS)."""
    return disk_state_script(state)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_module(case):
    steps = script(case["state"])
    if case.get("zpool_fails"):
        steps[-1] = dict(steps[-1], rc=1, stdout="", stderr="internal error: out of memory")
    result = run_module("fabric_disk_info", case["args"], steps, check_mode=case.get("check_mode", False))
    expect = case["expect"]
    # every recorded command ran, in order (run_module also checks none was left over)
    assert result["_commands"] == [[str(a) for a in s["command"]] for s in steps]
    assert result["changed"] is expect["changed"]
    assert result.get("failed", False) is expect.get("failed", False)
    for fragment in expect.get("msg_contains", []):
        assert fragment in result["msg"]
    if "disks_as_recorded" in expect:
        recorded = json.loads((DATA / "disks" / case["state"] / "discover.json").read_text())
        excluded = expect["disks_as_recorded"] if isinstance(expect["disks_as_recorded"], list) else []
        assert result["disks"] == [d for d in recorded if d["by_id"].removeprefix(BY_ID) not in excluded]
    if "in_use" in expect:
        assert sorted(d["name"] for d in result["disks"] if d["in_use"]) == expect["in_use"]
    assert "layout" not in result  # it reports; planning is fabric_zpool's
    assert result["warnings"] == expect.get("warnings", [])


def test_module_documentation_parses_and_matches_the_argument_spec():
    module = load_module("fabric_disk_info")
    doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc["module"] == "fabric_disk_info"
    assert set(doc["options"]) == {"exclude"}
    assert doc["attributes"]["check_mode"]["support"] == "full"
    examples = yaml.safe_load(module.EXAMPLES)
    assert all(task.get("name") for task in examples)
    assert not any("spec" in (task.get("fabric_disk_info") or {}) for task in examples)
    returned = yaml.safe_load(module.RETURN)
    assert set(returned) == {"disks"}
    assert all({"description", "returned", "type"} <= set(v) for v in returned.values())


@pytest.mark.parametrize("args", [
    {"spec": {"data": {"type": "mirror", "class": "hdd"}}},
    {"pool": "tank"},
])
def test_planning_options_are_gone_and_refused_before_any_command(args):
    """spec and pool moved to fabric_zpool (one discovery per pool): Ansible refuses them as unknown."""
    result = run_module("fabric_disk_info", args, [])
    assert result["failed"] and result["_commands"] == []
    assert "Unsupported parameters" in result["msg"] and next(iter(args)) in result["msg"]
