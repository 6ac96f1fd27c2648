"""Site-wide invariants (issue 18): mistakes that only show between hosts stop a site run before any host
changes, whatever --limit selects, with a message naming the field, the value, both hosts and the fix.

Each case adds one host variable through a second inventory source (the lab's inventory stays as it is)
and runs a playbook; the state of every host is read back afterwards through other paths
(/etc/iscsi, `iscsiadm -m session`, configfs, the pool) and must be exactly what it was."""

from __future__ import annotations

import pytest
import yaml
from conftest import ansible_playbook

BASE = "iqn.2026-11.io.fabric.lab"


def fabric_state(hosts) -> dict:
    out = {}
    for name, host in sorted(hosts.items()):
        out[name] = host.run(
            "md5sum /etc/iscsi/initiatorname.iscsi /etc/iscsi/iscsid.conf 2>/dev/null; "
            "iscsiadm -m session 2>/dev/null | sort; find /sys/kernel/config/target -maxdepth 6 2>/dev/null | sort; "
            "zfs list -H -o name 2>/dev/null; findmnt -rn -o TARGET | grep -E '^/datasets' | sort").stdout
    return out


CASES = {
    "two GPU nodes with one initiator name": (
        {"gpu2": {"iscsi_initiator_iqn": f"{BASE}:gpu1"}},
        [f"iscsi_initiator_iqn {BASE}:gpu1 is the initiator name of gpu1 and gpu2", "fix:"]),
    "two hosts with one storage address": (
        {"gpu2": {"fabric_storage_address": "10.77.0.11"}},
        ["storage address 10.77.0.11 is the address of gpu2 and storage1", "fix:"]),
    "an export naming a host that does not exist": (
        {"gpu1": {"iscsi_initiator_exports": [{"name": "ghost", "portal": "10.77.0.99:3260",
                                               "target_iqn": f"{BASE}:storage9-exports", "fstype": "ext4"}]}},
        ["gpu1's export ghost names portal 10.77.0.99:3260, the address of no storage node", "fix:"]),
}


# every case on the whole inventory, and the case (the initiator-name collision) under --limit too
RUNS = [(case, None) for case in sorted(CASES)] + [("two GPU nodes with one initiator name", limit)
                                                   for limit in ("gpu_nodes", "gpu2")]


@pytest.mark.parametrize("case, limit", RUNS)
def test_a_site_wide_mistake_stops_every_host_before_any_change(lab, hosts, converged, tmp_path, case, limit):
    host_vars, words = CASES[case]
    overlay = tmp_path / "overlay.yml"
    overlay.write_text(yaml.safe_dump({"all": {"hosts": host_vars}}))
    before = fabric_state(hosts)
    args = ["-i", str(overlay)] + (["--limit", limit] if limit else [])
    run = ansible_playbook(lab, "playbooks/site.yml", *args, gather_facts=False)
    assert run.rc != 0, f"{case}: the run succeeded:\n{run.stdout[-3000:]}"
    for word in words:
        assert word in run.output, f"{case}: {word!r} not in:\n{run.output[-3000:]}"
    assert all(counts["changed"] == 0 for counts in run.recap.values()), run.recap
    assert "Storage nodes |" not in run.stdout and "GPU nodes |" not in run.stdout  # no play after the check ran
    assert fabric_state(hosts) == before
