"""plugins/modules/fabric_zpool.py as data: cases in tests/unit/data/module_zpool.yaml (recorded outputs).

Layout-mode cases get their disks from the YAML (disk discovery patched). Spec-mode cases discover the
disks the way the module does on a node: a case with `state` replays that recorded disk state
(tests/unit/data/disks/STATE, support.disk_state_script) before its own commands; a spec-mode case without
one must end before any command, since any command, discovery included, fails its empty script."""

from __future__ import annotations

from unittest import mock

import pytest
import yaml
from support import DATA, run_case  # (support puts module_utils on sys.path)

# isort: split
import ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.storage.disks as fabric_disks
from fabric_core.base.model import DiskInfo

SPEC = yaml.safe_load((DATA / "module_zpool.yaml").read_text())


def _patched_discovery(case: dict) -> list:
    if "spec" in case["args"] and "disks" not in case:
        return []  # discovery runs for real, on the state's recorded commands (or on none at all)
    disks = [DiskInfo.from_dict(d) for d in case.get("disks", SPEC["disks"])]
    for d in disks:
        d.in_use = bool(d.in_use)
    return [mock.patch.object(fabric_disks, "discover", lambda runner: disks)]


@pytest.mark.parametrize("case", SPEC["cases"], ids=[c["name"] for c in SPEC["cases"]])
def test_fabric_zpool(case):
    result = run_case("fabric_zpool", case, extra_patches=_patched_discovery(case))
    if "diff_roles" in case:
        assert [v["role"] for v in result["diff"]["before"]["vdevs"]] == case["diff_roles"]["before"]
        assert [v["role"] for v in result["diff"]["after"]["vdevs"]] == case["diff_roles"]["after"]
    if case.get("diff"):
        assert ("diff" in result) != result.get("failed", False)
    else:
        assert "diff" not in result
    if not result.get("failed"):
        assert {"changed", "created", "added", "commands", "prepared", "layout", "health"} <= set(result)
    for sentence in case.get("explanation_contains", []):
        assert sentence in result["explanation"], result.get("explanation")
    if "spec" not in case["args"]:
        assert "explanation" not in result  # a written layout has no plan to explain
