# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: action plugin fabric_site_invariants (the site-wide checks, on the controller, over
# the whole inventory). The rules live in plugins/module_utils/fabric_core/services/site.py.

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import FabricError

# the core library, imported as the modules (and plugins/test/fabric.py) import it
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.services import site
from ansible_collections.gpufabric.storage.plugins.plugin_utils.inventory import (
    HostVars,
    initiator_name,
    role_default,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"storage_group", "gpu_group"})

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        storage_group = args.get("storage_group", "storage_nodes")
        gpu_group = args.get("gpu_group", "gpu_nodes")
        groups = task_vars["groups"]
        views = {}
        try:
            for name in groups.get("all", []):
                views[name] = self._view(name, HostVars(self._templar, task_vars, name), groups, storage_group,
                                         gpu_group)
            site.require(views, storage_group=storage_group, gpu_group=gpu_group)
        except FabricError as err:
            result.update(failed=True, msg=str(err))
            return result
        result.update(changed=False, msg=f"site-wide invariants hold for {len(views)} hosts",
                      hosts=sorted(views))
        return result

    def _view(self, name, hv, groups, storage_group, gpu_group) -> site.HostView:
        member = sorted(g for g, hosts in groups.items() if name in hosts and g not in ("all", "ungrouped"))
        address = str(hv.get("fabric_storage_address") or hv.get("ansible_host") or name)
        view = site.HostView(name=name, groups=member, address=address)
        if gpu_group in member:
            view.initiator = initiator_name(hv, name)
            view.chap_password = str(hv.get("iscsi_initiator_chap_password") or "")
            for e in hv.get("iscsi_initiator_exports") or []:
                view.exports.append(site.Export(name=str(e.get("name", "?")), portal=str(e.get("portal", "")),
                                                target_iqn=str(e.get("target_iqn", ""))))
        if storage_group in member:
            targets = hv.get("lio_target_targets") or []
            base = hv.template(hv.get("lio_target_base_iqn") or role_default("lio_target", "lio_target_base_iqn"))
            for t in targets:  # the lio_target role's rule: a target's IQN is `iqn`, else BASE:NAME
                acls = t.get("acls") or []
                view.targets.append(site.Target(
                    iqn=str(t.get("iqn") or f"{base}:{t.get('name', '?')}"),
                    initiators=[str(a.get("initiator", "")) for a in acls],
                    wwns=[str(lun["wwn"]).lower() for lun in t.get("luns") or [] if lun.get("wwn")],
                    chap_secrets={str(a.get("initiator", "")): ((a.get("chap") or {}).get("password"),
                                                                (a.get("chap") or {}).get("mutual_password"))
                                  for a in acls}))
            named = {}
            for key in ("fabricctl_groups",):
                value = hv.get(key) or {}
                named[key] = sorted({h for members in value.values() for h in members}) if value else []
            value = hv.get("fabricctl_hosts") or {}
            named["fabricctl_hosts"] = sorted(value) if value else []
            view.named_hosts = {k: v for k, v in named.items() if v}
        return view
