"""fabric_core.services.site: the site-wide invariants, on inventories shaped like the lab's."""

from __future__ import annotations

import pytest
from fabric_core.services import site
from fabric_core.services.site import Export, HostView, SiteInvariantError, Target

BASE = "iqn.2026-11.io.fabric.lab"


def lab(**change) -> dict:
    """The lab's reference inventory as HostViews (storage1 exports welcome to both GPU nodes)."""
    hosts = {
        "storage1": HostView("storage1", ["storage_nodes"], "10.77.0.11", targets=[Target(
            f"{BASE}:storage1-exports", [f"{BASE}:gpu1", f"{BASE}:gpu2"],
            chap_secrets={f"{BASE}:gpu1": ("lab-gpu1-chap-a1", "m1"), f"{BASE}:gpu2": ("lab-gpu2-chap-b2", "m2")})]),
        "gpu1": HostView("gpu1", ["gpu_nodes"], "10.77.0.21", f"{BASE}:gpu1", "lab-gpu1-chap-a1",
                         [Export("welcome", "10.77.0.11:3260", f"{BASE}:storage1-exports")]),
        "gpu2": HostView("gpu2", ["gpu_nodes"], "10.77.0.22", f"{BASE}:gpu2", "lab-gpu2-chap-b2",
                         [Export("welcome", "10.77.0.11:3260", f"{BASE}:storage1-exports")]),
    }
    for path, value in change.items():
        host, attr = path.split("__")
        setattr(hosts[host], attr, value)
    return hosts


def test_the_lab_inventory_holds():
    assert site.check(lab()) == []
    site.require(lab())


def test_two_gpu_nodes_with_one_initiator_name():
    found = site.check(lab(gpu2__initiator=f"{BASE}:gpu1"))
    assert [(v.field, v.value, v.hosts) for v in found][:1] == [("iscsi_initiator_iqn", f"{BASE}:gpu1",
                                                                 ("gpu1", "gpu2"))]
    assert "each would be let in to the other's exports" in found[0].problem and "gpu2" in found[0].fix
    with pytest.raises(SiteInvariantError) as exc:
        site.require(lab(gpu2__initiator=f"{BASE}:gpu1"))
    assert "nothing was changed on any host" in exc.value.problem and exc.value.exit_code == 1


def test_an_invalid_initiator_name():
    found = site.check(lab(gpu1__initiator="iqn.2026-11.lab:GPU1"))
    assert found[0].field == "iscsi_initiator_iqn" and found[0].hosts == ("gpu1",)


def test_two_hosts_with_one_storage_address():
    found = site.check(lab(gpu2__address="10.77.0.11"))
    assert [(v.field, v.value, v.hosts) for v in found] == [("fabric_storage_address", "10.77.0.11",
                                                             ("gpu2", "storage1"))]


def test_an_export_naming_a_portal_no_storage_node_has():
    found = site.check(lab(gpu1__exports=[Export("welcome", "10.77.0.99:3260", f"{BASE}:storage1-exports")]))
    assert len(found) == 1 and found[0].field == "iscsi_initiator_exports" and "10.77.0.99" in found[0].problem
    assert "no storage node" in found[0].problem


def test_an_export_naming_a_target_the_storage_node_does_not_declare():
    found = site.check(lab(gpu1__exports=[Export("other", "10.77.0.11", f"{BASE}:nosuch")]))
    assert len(found) == 1 and found[0].hosts == ("gpu1", "storage1") and "does not declare" in found[0].problem


def test_an_acl_for_an_initiator_no_gpu_node_uses():
    hosts = lab()
    hosts["storage1"].targets[0].initiators.append(f"{BASE}:gpu9")
    found = site.check(hosts)
    assert len(found) == 1 and found[0].value == f"ACL {BASE}:gpu9"


def test_shared_chap_secrets_are_refused_without_showing_them():
    found = site.check(lab(gpu2__chap_password="lab-gpu1-chap-a1"))
    assert [v.field for v in found] == ["iscsi_initiator_chap_password"]
    assert "lab-gpu1-chap-a1" not in str(found[0]) and found[0].value == "(secret not shown)"
    hosts = lab()
    hosts["storage1"].targets[0].chap_secrets[f"{BASE}:gpu2"] = ("lab-gpu1-chap-a1", "m2")
    found = site.check(hosts)
    assert len(found) == 1 and "one CHAP secret" in found[0].problem and "lab-gpu1" not in str(found[0])


def test_two_storage_nodes_declaring_one_target_name_and_one_serial():
    hosts = lab()
    wwn = "6001405a-0000-4000-8000-000000000001"
    hosts["storage1"].targets[0].wwns = [wwn]
    hosts["storage2"] = HostView("storage2", ["storage_nodes"], "10.77.0.12", targets=[
        Target(f"{BASE}:storage1-exports", [f"{BASE}:gpu1"], wwns=[wwn])])
    fields = sorted((v.field, v.value) for v in site.check(hosts))
    assert fields == [("lio_target_targets", f"LUN serial {wwn}"), ("lio_target_targets", f"{BASE}:storage1-exports")]


def test_hosts_named_by_fabricctl_groups_must_exist():
    found = site.check(lab(storage1__named_hosts={"fabricctl_groups": ["gpu1", "gpu7"]}))
    assert [(v.field, v.value, v.hosts) for v in found] == [("fabricctl_groups", "gpu7", ("storage1",))]


def test_the_controller_plugins_read_the_roles_own_defaults():
    """plugin_utils.inventory.role_default (fabric_site_invariants and fabric_chap, for a variable the inventory
    does not set): the defaults/main.yml of the roles of the collection the plugin belongs to."""
    from ansible_collections.gpufabric.storage.plugins.plugin_utils.inventory import role_default

    assert role_default("lio_target", "lio_target_base_iqn") == BASE
    assert role_default("fabricctl", "fabricctl_iqn_base") == "{{ fabric_iqn_base }}.fabricctl"
