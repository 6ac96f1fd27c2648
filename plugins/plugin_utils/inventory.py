"""The inventory as the roles read it, for the plugins that run on the controller (fabric_site_invariants,
fabric_chap): one host's variables templated in its own context, the roles' defaults, and the rules by which a
role derives a value from others (a GPU node's initiator name), written once here.

Controller side only, so it lives in plugin_utils (the collection's shared code for controller plugins) and
not in module_utils/fabric_core: no module imports it, it never travels to a node, and it may import PyYAML
(a requirement of ansible-core on the controller, not of a node's Python). It imports nothing of Ansible; the
caller passes its templar.
"""

from __future__ import annotations

from pathlib import Path

import yaml

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


def initiator_name(hv: HostVars, host: str) -> str:
    """The initiator name a GPU node presents: the iscsi_initiator role's rule (its defaults/main.yml),
    iscsi_initiator_iqn, else <iscsi_initiator_iqn_base>:<inventory_hostname>, as written."""
    initiator = hv.get("iscsi_initiator_iqn")
    if not initiator:
        base = hv.get("iscsi_initiator_iqn_base") or role_default("iscsi_initiator", "iscsi_initiator_iqn_base")
        initiator = f"{hv.template(base)}:{host}"
    return str(initiator)
