"""library/fabric_zpool.py as data: cases in tests/unit/data/module_zpool.yaml (recorded outputs)."""

from __future__ import annotations

from unittest import mock

import pytest
import yaml
from support import DATA, run_case  # (support puts module_utils on sys.path)

# isort: split
import ansible.module_utils.fabric_core.disks as fabric_disks
from fabric_core.model import DiskInfo

SPEC = yaml.safe_load((DATA / "module_zpool.yaml").read_text())




@pytest.mark.parametrize("case", SPEC["cases"], ids=[c["name"] for c in SPEC["cases"]])
def test_fabric_zpool(case):
    disks = [DiskInfo.from_dict(d) for d in case.get("disks", SPEC["disks"])]
    for d in disks:
        d.in_use = bool(d.in_use)
    discover = mock.patch.object(fabric_disks, "discover", lambda runner: disks)
    result = run_case("fabric_zpool", case, extra_patches=[discover])
    if "diff_roles" in case:
        assert [v["role"] for v in result["diff"]["before"]["vdevs"]] == case["diff_roles"]["before"]
        assert [v["role"] for v in result["diff"]["after"]["vdevs"]] == case["diff_roles"]["after"]
    if case.get("diff"):
        assert ("diff" in result) != result.get("failed", False)
    else:
        assert "diff" not in result
    if not result.get("failed"):
        assert {"changed", "created", "added", "commands", "prepared", "layout", "health"} <= set(result)
