"""The inventory as the roles read it, for the plugins that run on the controller (fabric_site_invariants,
fabric_chap): one host's variables templated in its own context, the roles' defaults, and the rules by which a
role derives a value from others (which variables give a GPU node's initiator name, ``initiator_of``; the rule
itself is the core's ``names.initiator_name``), written once here.

Controller side only, so it lives in plugin_utils (the collection's shared code for controller plugins) and
not in module_utils/fabric_core: no module imports it, it never travels to a node, and it may import PyYAML
(a requirement of ansible-core on the controller, not of a node's Python). It imports nothing of Ansible but the
collection's own core; the caller passes its templar.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base import names
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import UserError

ROLES = Path(__file__).resolve().parents[2] / "roles"  # plugins/plugin_utils/inventory.py -> the collection root


def role_default(role: str, name: str):
    """A role's default for a variable, from the role's own defaults/main.yml (a literal, not templated)."""
    with open(ROLES / role / "defaults" / "main.yml") as fh:
        return (yaml.safe_load(fh) or {}).get(name)


class HostVars:
    """One host's variables as its own tasks would see them: the inventory's raw values, templated with that
    host's variables plus hostvars and groups (a group variable may name another host's variable; Ansible's
    hostvars[host] templates without hostvars, so such a value would fail there).

    ansible-core templates only trusted text (what the inventory and playbooks hold); the roles' defaults
    read with ``role_default`` are used as literal values."""

    def __init__(self, templar, task_vars: dict, host: str):
        self._raw = task_vars["hostvars"].raw_get(host)
        context = dict(self._raw)
        context.update(hostvars=task_vars["hostvars"], groups=task_vars["groups"], inventory_hostname=host)
        self._templar = templar.copy_with_new_env(available_variables=context)

    def get(self, key: str, default=None):
        if key not in self._raw:
            return default
        value = self._templar.template(self._raw[key])
        return default if value is None else value

    def template(self, value):
        return self._templar.template(value)


# A GPU node's initiator name, from its inventory variables (what every play and the controller see):
INITIATOR_VARIABLE = "iscsi_initiator_iqn"  # set on a host: its initiator name, as it is
BASE_VARIABLE = "fabric_iqn_base"  # THE base: the site's IQN base (fabricctl's and the node agent's targets' too)
DEPRECATED_BASE_VARIABLE = "iscsi_initiator_iqn_base"  # its former name, still read; never both, differing
DEFAULT_BASE = "iqn.2026-11.io.fabric.lab"  # neither set (the lab's base)


def initiator_of(get, host: str) -> str:
    """The initiator name a GPU node presents, from its variables (``get(name)``: the value, or None when not set):
    ``iscsi_initiator_iqn`` when set, else ``names.initiator_name(BASE, host)`` (the one rule) with BASE
    ``fabric_iqn_base``, or its deprecated alias ``iscsi_initiator_iqn_base``. The one place that says which
    variables count: the filter ``fabric_initiator_name`` (the roles) and the controller plugins call it.
    An inventory that sets both bases to different values is refused, naming both."""
    initiator = get(INITIATOR_VARIABLE)
    if initiator:
        return str(names.validate_iqn(str(initiator)))
    base, alias = get(BASE_VARIABLE), get(DEPRECATED_BASE_VARIABLE)
    if base and alias and str(base) != str(alias):
        raise UserError(f"host {host}: {BASE_VARIABLE} is {base} and {DEPRECATED_BASE_VARIABLE} is {alias}: two bases "
                        "for one initiator name",
                        f"set only {BASE_VARIABLE} ({DEPRECATED_BASE_VARIABLE} is its former name), or this host's "
                        f"{INITIATOR_VARIABLE}")
    return names.initiator_name(str(base or alias or DEFAULT_BASE), host)


def initiator_name(hv: HostVars, host: str) -> str:
    """The initiator name a GPU node presents (``initiator_of`` on the host's templated inventory variables)."""
    return initiator_of(hv.get, host)
