"""The CHAP store's vault id (issue 26, item 1): a production store is never encrypted with the lab's vault id,
whose password is committed in the repository.

The README's production steps are followed on a scratch copy of inventory/production, with a generated
production vault password given as a file (`--vault-id prod@FILE`, as `prod@prompt` would), through the real
fabric_chap action plugin run by ansible-playbook from this checkout (its ansible.cfg): the lab's password must
not open the store it writes, the production one must, and the header names the production id. A run that
loads several vault ids without naming the store's, or the lab's password under another name, is refused with
the fix and writes nothing. The rule itself (fabric_core.base.chap.store_vault_id) is tested as a pure function.
"""

from __future__ import annotations

import configparser
import os
import secrets
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fabric_core.base import chap
from fabric_core.base.errors import UserError
from support import load_file

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LAB_PASSWORD = REPO / "inventory" / "lab" / "vault-password.txt"
STORE = "fabric-chap.vault.yml"

# One play on the controller that runs what the roles' preflights run (gpufabric.storage.fabric_chap for the GPU
# nodes), without connecting to any host.
PLAY = [{"hosts": "storage_nodes", "gather_facts": False, "connection": "local", "tasks": [
    {"name": "CHAP secrets of the GPU nodes", "gpufabric.storage.fabric_chap": {"hosts": "{{ groups.gpu_nodes }}"},
     "run_once": True, "register": "chap"},
    {"ansible.builtin.debug": {"msg": "GENERATED={{ chap.generated | join(',') }}"}, "run_once": True}]}]


def env() -> dict:
    """An operator's shell: none of the lab's settings (the Makefile and the integration tests set them)."""
    drop = {"ANSIBLE_VAULT_IDENTITY_LIST", "ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_VAULT_ID_MATCH",
            "ANSIBLE_VAULT_ENCRYPT_IDENTITY", "ANSIBLE_CONFIG", "FABRIC_RUNLOG"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_STRATEGY": "linear", "ANSIBLE_STDOUT_CALLBACK": "default",
            "ANSIBLE_DEPRECATION_WARNINGS": "False"}


def sh(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env=env(), timeout=300)


@pytest.fixture
def site(tmp_path):
    """A scratch production inventory after the README's first two steps: the vault copied from the example
    (with this site's own pair for one host) and encrypted with --vault-id prod@FILE."""
    inventory = tmp_path / "production"
    shutil.copytree(REPO / "inventory" / "production", inventory)
    password = tmp_path / "prod-vault-password"
    password.write_text(secrets.token_urlsafe(24) + "\n")
    password.chmod(0o600)
    vault = inventory / "group_vars" / "all" / "vault.yml"
    shutil.copy(inventory / "vault.example.yml", vault)
    vault.write_text(yaml.safe_dump({"vault_fabric_chap": {
        "gpu-a001": {"password": chap.generate_secret(), "mutual_password": chap.generate_secret()}}}))
    proc = sh(str(BIN / "ansible-vault"), "encrypt", "--vault-id", f"prod@{password}", str(vault))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert vault.read_bytes().startswith(b"$ANSIBLE_VAULT;1.2;AES256;prod\n")
    play = tmp_path / "chap.yml"
    play.write_text(yaml.safe_dump(PLAY))
    return inventory, password, play


def playbook(inventory: Path, play: Path, *vault_ids: str) -> subprocess.CompletedProcess:
    args = [a for vid in vault_ids for a in ("--vault-id", vid)]
    return sh(str(BIN / "ansible-playbook"), "-i", str(inventory / "hosts.yml"), *args, str(play))


def view(store: Path, vault_id: str) -> subprocess.CompletedProcess:
    return sh(str(BIN / "ansible-vault"), "view", "--vault-id", vault_id, str(store))


def test_ansible_cfg_loads_no_vault_identity():
    """ansible.cfg serves every inventory of this checkout: it must not load the lab's (public) vault password."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg")
    loaded = {k for k in cfg["defaults"] if k.startswith("vault_")}
    assert not loaded, f"ansible.cfg loads a vault secret for every inventory: {sorted(loaded)}"


def test_the_readme_production_steps_write_a_store_the_lab_password_cannot_open(site):
    inventory, password, play = site
    proc = playbook(inventory, play, f"prod@{password}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "GENERATED=gpu-a002,gpu-a003,gpu-a004" in out, out[-3000:]
    store = inventory / STORE
    raw = store.read_bytes()
    assert raw.startswith(b"$ANSIBLE_VAULT;1.2;AES256;prod\n"), raw[:60]
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    lab = view(store, f"lab@{LAB_PASSWORD}")
    assert lab.returncode != 0 and "Decryption failed" in lab.stderr, lab.stdout[:200] + lab.stderr[-500:]
    assert chap.STORE_KEY not in lab.stdout
    prod = view(store, f"prod@{password}")
    assert prod.returncode == 0, prod.stderr[-1000:]
    kept = yaml.safe_load(prod.stdout)[chap.STORE_KEY]
    assert sorted(kept) == ["gpu-a002", "gpu-a003", "gpu-a004"]
    # with the lab's id loaded as well (an operator's exported variable), the inventory's own id is chosen
    proc = playbook(inventory, play, f"lab@{LAB_PASSWORD}", f"prod@{password}")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert store.read_bytes() == raw  # nothing to generate: not rewritten


def test_ambiguous_or_lab_vault_ids_are_refused_and_write_nothing(site):
    inventory, password, play = site
    main = inventory / "group_vars" / "all" / "main.yml"
    main.write_text("".join(line for line in main.read_text().splitlines(keepends=True)
                            if not line.startswith("fabric_chap_vault_id:")))
    proc = playbook(inventory, play, f"lab@{LAB_PASSWORD}", f"prod@{password}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "several vault ids are loaded (lab, prod)" in out and "fabric_chap_vault_id" in out, out[-3000:]
    assert sorted(p.name for p in inventory.iterdir()) == sorted(p.name for p in
                                                                 (REPO / "inventory" / "production").iterdir())
    # the lab's password under the production id's name (prod@inventory/lab/vault-password.txt), the site's
    # vault left out: still the lab's, refused
    (inventory / "group_vars" / "all" / "vault.yml").unlink()
    proc = playbook(inventory, play, f"prod@{LAB_PASSWORD}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "with the lab's vault id 'prod'" in out and "--vault-id prod@prompt" in out, out[-3000:]
    assert not (inventory / STORE).exists() and not (inventory / (STORE + ".lock")).exists()


# --- the rule, pure -----------------------------------------------------------------------------------------------

def choose(loaded, chosen=None, stored=None, lab_ids=(), lab_store=False):
    return chap.store_vault_id(loaded, chosen=chosen, stored=stored, lab_ids=lab_ids, lab_store=lab_store)


def test_the_store_vault_id_rule():
    assert choose(["prod"]) == "prod"
    assert choose(["lab", "prod"], chosen="prod", lab_ids={"lab"}) == "prod"
    assert choose(["lab", "prod"], stored="prod", lab_ids={"lab"}) == "prod"
    assert choose(["prod", "old"], chosen="prod", stored="old") == "prod"  # the choice re-encrypts (a rekey)
    assert choose(["lab"], lab_ids={"lab"}, lab_store=True) == "lab"  # the lab's own inventory
    assert choose(["lab", "x"], chosen="lab", lab_ids={"lab"}, lab_store=True) == "lab"
    for kwargs, words in [
        ({"loaded": []}, "no Ansible Vault secret is loaded"),
        ({"loaded": ["lab", "prod"]}, "several vault ids are loaded (lab, prod)"),
        ({"loaded": ["lab", "prod"], "lab_store": True}, "several vault ids are loaded"),
        ({"loaded": ["prod"], "chosen": "site"}, "fabric_chap_vault_id is 'site', but this run loaded no"),
        ({"loaded": ["lab"]}, "with the lab's vault id 'lab'"),
        ({"loaded": ["lab", "prod"], "chosen": "lab"}, "would be encrypted with the lab's vault id 'lab'"),
        ({"loaded": ["prod"], "lab_ids": {"prod"}}, "the lab's vault id 'prod'"),  # the lab's password, renamed
        ({"loaded": ["prod", "lab"], "chosen": "prod", "stored": "lab"}, "is encrypted with the lab's vault id"),
    ]:
        with pytest.raises(UserError) as err:
            choose(**kwargs)
        assert words in str(err.value), (kwargs, str(err.value))
        assert err.value.fix, kwargs


def load_plugin():
    return load_file(REPO / "plugins" / "action" / "fabric_chap.py", "fabric_chap_plugin")


def test_the_plugin_knows_the_lab_by_its_password_and_its_inventory(tmp_path):
    from ansible.parsing.vault import VaultSecret
    plugin = load_plugin()
    lab_password = LAB_PASSWORD.read_bytes().strip()
    loaded = [("lab", VaultSecret(b"another")), ("prod", VaultSecret(lab_password)), ("site", VaultSecret(b"own"))]
    assert plugin.lab_ids(loaded) == {"lab", "prod"}
    assert plugin.is_lab_store(str(REPO / "inventory" / "lab" / STORE))
    assert not plugin.is_lab_store(str(tmp_path / STORE))
    assert not plugin.is_lab_store(str(REPO / "inventory" / "production" / STORE))
    plain = tmp_path / STORE  # a store that is not a vault file: refused, its content not shown
    plain.write_text("fabric_chap_store: {gpu1: {password: not-shown-1234}}\n")
    with pytest.raises(Exception) as err:  # noqa: PT011 - the plugin's UserError is the collection's class
        plugin.Store(str(plain), None, None).header_id()
    assert type(err.value).__name__ == "UserError" and "is not an Ansible Vault file" in str(err.value)
    assert "not-shown-1234" not in str(err.value)
