# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: action plugin fabric_chap (per-host CHAP secrets, on the controller). The rules live in
# plugins/module_utils/fabric_core/chap.py.

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile

import yaml
from ansible.parsing.vault import VaultLib, match_encrypt_secret, parse_vaulttext_envelope
from ansible.plugins.action import ActionBase
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core import chap
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.errors import FabricError, UserError
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.rules import LIO
from ansible_collections.gpufabric.storage.plugins.plugin_utils.inventory import HostVars, initiator_name

HEADER = ("# Per-GPU-node CHAP secrets, generated and rotated by the fabric_chap action plugin (Ansible Vault).\n"
          "# Do not edit: remove a host's entry to have a new secret generated, or set fabric_chap_rotate.\n")


class Store:
    """The vault file of generated and rotated pairs: read and written under one lock per file."""

    def __init__(self, path: str, vault: VaultLib, vault_id: str | None):
        self.path = path
        self.vault = vault
        self.vault_id = vault_id

    @contextlib.contextmanager
    def locked(self):
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the other hosts of the run wait: they read what this one wrote
            yield

    def read(self) -> dict:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return {}
        vault_id = parse_vaulttext_envelope(data)[3]  # (ciphertext, format version, cipher, vault id)
        self.vault_id = self.vault_id or vault_id
        loaded = yaml.safe_load(self.vault.decrypt(data)) or {}
        return dict(loaded.get(chap.STORE_KEY) or {})

    def write(self, store: dict) -> None:
        vault_id, secret = match_encrypt_secret(self.vault.secrets, encrypt_vault_id=self.vault_id)
        text = HEADER + yaml.safe_dump({chap.STORE_KEY: store}, sort_keys=True, default_flow_style=False)
        encrypted = self.vault.encrypt(text, secret=secret, vault_id=vault_id)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.path) or ".", prefix=".fabric-chap.")
        try:
            with os.fdopen(fd, "wb") as fh:  # mkstemp: mode 0600 from the start
                fh.write(encrypted)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"hosts"})
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result["_ansible_no_log"] = True  # it carries secrets, whatever the task says
        task_vars = task_vars or {}
        hosts = [str(h) for h in self._task.args.get("hosts") or []]
        tv = self._templar.copy_with_new_env(available_variables=task_vars)

        def var(name, default=None):
            value = task_vars.get(name, default)
            return tv.template(value) if value is not None else default

        if bool(var("fabric_insecure_no_chap", False)):
            result.update(changed=False, chap={}, initiators={}, generated=[], rotated=[], insecure=True)
            return result
        try:
            store_path = str(var("fabric_chap_store")
                             or os.path.join(str(task_vars.get("inventory_dir") or "."), "fabric-chap.vault.yml"))
            store = Store(store_path, self._loader._vault, var("fabric_chap_vault_id"))
            if not store.vault.secrets:
                raise UserError("no Ansible Vault secret is loaded, so the per-host CHAP secrets cannot be kept",
                                "run with the inventory's vault id (ansible.cfg's vault_identity_list, or "
                                "--vault-id NAME@prompt)")
            with store.locked():
                out = chap.resolve(hosts, given=var("vault_fabric_chap", {}), stored=store.read(),
                                   rotate=var("fabric_chap_rotate", {}))
                changed = bool(out["generated"] or out["rotated"])
                if changed and not self._task.check_mode:
                    store.write(out["store"])
            mutual = bool(var("fabric_chap_mutual", True))
            target_userid = str(var("fabric_chap_target_userid", "fabric-target"))
            creds = {h: chap.credentials(h, pair, target_userid=target_userid, mutual=mutual).fields(LIO, compact=True)
                     for h, pair in out["secrets"].items()}
        except FabricError as err:
            result.update(failed=True, msg=str(err))
            return result
        result.update(changed=changed, chap=creds, initiators=self._initiators(hosts, task_vars),
                      generated=out["generated"], rotated=out["rotated"], insecure=False, store=store_path)
        return result

    def _initiators(self, hosts, task_vars) -> dict:
        """The initiator name each host of the inventory presents (inventory.initiator_name, the iscsi_initiator
        role's rule) -> the host."""
        return {initiator_name(HostVars(self._templar, task_vars, host), host): host
                for host in hosts if host in (task_vars.get("hostvars") or {})}
