# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: action plugin fabric_chap (per-host CHAP secrets, on the controller). The rules live in
# plugins/module_utils/fabric_core/base/chap.py.

from __future__ import annotations

import contextlib
import fcntl
import os

import yaml
from ansible.parsing.vault import VaultLib, match_encrypt_secret, parse_vaulttext_envelope
from ansible.plugins.action import ActionBase
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base import atomic, chap
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import FabricError, UserError
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.rules import LIO
from ansible_collections.gpufabric.storage.plugins.plugin_utils.inventory import HostVars, initiator_name

# The lab's inventory in this checkout (the collection root is the repository root): its store alone may be
# encrypted with the lab's vault id, whose password is committed there.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
LAB_INVENTORY = os.path.join(ROOT, "inventory", "lab")
LAB_PASSWORD_FILE = os.path.join(LAB_INVENTORY, "vault-password.txt")

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

    def header_id(self) -> str | None:
        """The vault id named in the store's header (None without a store): read before anything is decrypted."""
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return None
        try:
            return parse_vaulttext_envelope(data)[3] or None  # (ciphertext, version, cipher, vault id)
        except Exception:  # noqa: BLE001 - AnsibleVaultFormatError and the parser's others: not a vault file
            raise UserError(f"{self.path} is not an Ansible Vault file (its content is not shown)",
                            "restore it from where the inventory is kept, or remove it: new secrets are then "
                            "generated (and rotated into the targets and GPU nodes)") from None

    def read(self) -> dict:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return {}
        loaded = yaml.safe_load(self.vault.decrypt(data)) or {}
        return dict(loaded.get(chap.STORE_KEY) or {})

    def write(self, store: dict) -> None:
        """Encrypt with self.vault_id (chap.store_vault_id's choice, never Ansible's first-loaded default)."""
        vault_id, secret = match_encrypt_secret(self.vault.secrets, encrypt_vault_id=self.vault_id)
        text = HEADER + yaml.safe_dump({chap.STORE_KEY: store}, sort_keys=True, default_flow_style=False)
        encrypted = self.vault.encrypt(text, secret=secret, vault_id=vault_id)
        atomic.write_file(self.path, encrypted, mode=0o600)  # a unique temporary name, 0600 from the start


def lab_ids(secrets) -> set[str]:
    """The loaded vault ids that are the lab's: named chap.LAB_VAULT_ID, or whose password is the lab's committed
    one (LAB_PASSWORD_FILE, when this checkout has it), whatever they are called."""
    try:
        with open(LAB_PASSWORD_FILE, "rb") as fh:
            lab_password = fh.read().strip()
    except OSError:
        lab_password = None
    return {str(vid) for vid, secret in secrets
            if vid == chap.LAB_VAULT_ID or (lab_password and secret.bytes == lab_password)}


def is_lab_store(path: str) -> bool:
    """The store is the lab inventory's own (inventory/lab of this checkout)."""
    return os.path.realpath(os.path.dirname(os.path.abspath(path))) == os.path.realpath(LAB_INVENTORY)


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
            vault = self._loader._vault
            store = Store(store_path, vault, None)

            def vault_id() -> str:
                return chap.store_vault_id([vid for vid, _secret in vault.secrets],
                                           chosen=var("fabric_chap_vault_id") or None, stored=store.header_id(),
                                           lab_ids=lab_ids(vault.secrets), lab_store=is_lab_store(store_path))

            vault_id()  # refused (a guess, the lab's id) before anything is created, decrypted or written
            with store.locked():
                store.vault_id = vault_id()  # again under the lock: another host of the run may have written it
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
