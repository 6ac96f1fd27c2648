# gpu-storage-fabric: Jinja filters of the collection, backed by the core library's rules.
"""Jinja filters (``hostvars[h] | gpufabric.storage.fabric_initiator_name(h)``) for what the roles derive from the
inventory, so that every role and the controller plugins derive it one way.

``fabric_initiator_name``: the initiator name a GPU node presents. Its variables say which (``iscsi_initiator_iqn``
when set; else the base, ``fabric_iqn_base`` or its deprecated alias ``iscsi_initiator_iqn_base``:
plugins/plugin_utils/inventory.py, ``initiator_of``) and the core's one rule makes it
(``fabric_core.base.names.initiator_name``: BASE:HOSTNAME, lower case, a digest for a name an IQN cannot hold).
The iscsi_initiator role's default, the fabricctl role's list of hosts, the fabric_node role's configuration
and the controller plugins (fabric_chap, fabric_site_invariants) all call it.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import UserError
from ansible_collections.gpufabric.storage.plugins.plugin_utils.inventory import initiator_of


def fabric_initiator_name(variables, hostname):
    """The initiator name of the GPU node ``hostname`` whose variables are ``variables`` (``hostvars[hostname]``)."""
    if not isinstance(variables, Mapping):
        raise AnsibleFilterError(f"fabric_initiator_name: expected a host's variables (hostvars[HOST]), got "
                                 f"{type(variables).__name__}")
    if not isinstance(hostname, str) or not hostname:
        raise AnsibleFilterError("fabric_initiator_name: give the host's inventory name (hostvars[h] | "
                                 "gpufabric.storage.fabric_initiator_name(h))")

    def get(name):
        value = variables.get(name)
        return value if value not in ("", None) else None

    try:
        return initiator_of(get, hostname)
    except UserError as err:
        raise AnsibleFilterError(f"fabric_initiator_name: {err}") from None


class FilterModule:
    def filters(self):
        return {"fabric_initiator_name": fabric_initiator_name}
