"""Per-host CHAP secrets: every GPU node has its own pair (the initiator's secret, and the target's for mutual
CHAP), generated when missing, rotated on request, never shared between two hosts.

A host's CHAP credentials are its identity on the storage network: an initiator name is only a claim (any
host can set another's), the secret proves it. One secret shared by every host would let each pose as any
other; so each host has its own, the same for every target it logs in to (LIO's ACLs are per initiator).

Where secrets come from, for each host (``resolve``; pure, the caller reads and writes the store):

1. a rotation asked for (``rotate``: host -> rotation id) and not yet done (the store does not record that id
   for the host): a new pair, kept in the store with the id (asking again with the same id changes nothing);
2. a rotated pair in the store;
3. the operator's own pair (Ansible Vault variable ``vault_fabric_chap``, the lab's committed vault);
4. a generated pair in the store;
5. none yet: a new pair is generated into the store.

Secrets are ``SECRET_LENGTH`` characters drawn with ``secrets`` (the OS's CSPRNG) from ``ALPHABET``: 16 of
69 symbols, 97.7 bits, within what LIO and every initiator accept (12-16 printable characters, RFC 3720's
96 bits), no white space, nothing a shell, YAML or an open-iscsi node record would mangle.
"""

from __future__ import annotations

import math
import secrets
import string
from collections.abc import Collection, Iterable, Mapping, Sequence

from .errors import UserError
from .names import validate_hostname
from .rules import CHAP_SECRET_MAX, CHAP_SECRET_MIN, LIO, Chap, chap_secret_ok, parse_chap

ALPHABET = string.ascii_letters + string.digits + "-_.+=~^"
SECRET_LENGTH = 16
BITS = SECRET_LENGTH * math.log2(len(ALPHABET))
FIELDS = ("password", "mutual_password")
STORE_KEY = "fabric_chap_store"  # the variable the store file defines (host -> {password, mutual_password, rotation})
LAB_VAULT_ID = "lab"  # the lab's vault identity: its password is committed (inventory/lab/vault-password.txt)


def generate_secret(choice=secrets.choice) -> str:
    """One secret: SECRET_LENGTH characters of ALPHABET from the operating system's CSPRNG."""
    return "".join(choice(ALPHABET) for _position in range(SECRET_LENGTH))


def generate_pair(choice=secrets.choice) -> dict[str, str]:
    """A host's two secrets, different from each other."""
    password = generate_secret(choice)
    mutual = generate_secret(choice)
    while mutual == password:
        mutual = generate_secret(choice)
    return {"password": password, "mutual_password": mutual}


def resolve(hosts: Iterable[str], *, given: Mapping | None, stored: Mapping | None, rotate: Mapping | None = None,
            choice=secrets.choice) -> dict:
    """The pair of every host (see the module's docstring for the order), and what changed in the store.

    Returns {"secrets": {host: {password, mutual_password}}, "store": the store after (a new dict),
    "generated": [hosts], "rotated": [hosts]}. Refuses (UserError, never showing a secret) a malformed pair
    and two hosts sharing a secret."""
    given, rotate = dict(given or {}), {str(k): str(v) for k, v in (rotate or {}).items()}
    store = {str(h): dict(v) for h, v in (stored or {}).items()}
    out: dict = {}
    generated, rotated = [], []
    for host in hosts:
        validate_hostname(host)
        entry = store.get(host)
        if host in rotate and (entry or {}).get("rotation") != rotate[host]:
            store[host] = {**generate_pair(choice), "rotation": rotate[host]}
            rotated.append(host)
        elif entry is None and host not in given:
            store[host] = {**generate_pair(choice), "rotation": ""}
            generated.append(host)
        entry = store.get(host)
        pair = entry if entry is not None and (entry.get("rotation") or host not in given) else given[host]
        out[host] = {f: str((pair or {}).get(f) or "") for f in FIELDS}
        _check_pair(host, out[host], "the store" if pair is entry else "vault_fabric_chap")
    check_distinct(out)
    return {"secrets": out, "store": store, "generated": generated, "rotated": rotated}


def _check_pair(host: str, pair: dict, source: str) -> None:
    for field in FIELDS:
        if not chap_secret_ok(pair[field]):
            raise UserError(f"{source}: {host}.{field} must be {CHAP_SECRET_MIN}-{CHAP_SECRET_MAX} printable "
                            "characters without spaces (not shown)",
                            f"fix it in {source}, or remove the entry: a new secret is then generated")
    if pair["password"] == pair["mutual_password"]:
        raise UserError(f"{source}: {host}.mutual_password equals its password",
                        "use different secrets for the two directions (RFC 3720 8.2.1)")


def check_distinct(pairs: Mapping[str, Mapping]) -> None:
    """No secret belongs to two hosts (either could log in as the other): the rule fabric_core.services.site applies to
    the inventory, applied to the per-host secrets."""
    owner: dict = {}
    for host, pair in sorted(pairs.items()):
        for field in FIELDS:
            secret = pair.get(field)
            if secret and owner.setdefault(secret, host) != host:
                raise UserError(f"{owner[secret]} and {host} share a CHAP secret (not shown): either could log in as "
                                "the other", "give every GPU node its own secrets (remove one of the entries: a "
                                "new secret is generated)")


def credentials(host: str, pair: Mapping, *, target_userid: str = "", mutual: bool = True) -> Chap:
    """A host's CHAP credentials (rules.Chap): its own name as userid and its password; with ``mutual`` the
    targets' userid and the host's mutual secret."""
    raw = {"userid": host, "password": pair["password"]}
    if mutual:
        raw.update(mutual_userid=target_userid, mutual_password=pair["mutual_password"])
    chap = parse_chap(raw, LIO, where=f"{host}: ")
    if chap is None:  # never: both fields are given
        raise AssertionError(f"{host}: no CHAP credentials parsed")
    return chap


def store_vault_id(loaded: Sequence[str], *, chosen: str | None, stored: str | None, lab_ids: Collection[str],
                   lab_store: bool) -> str:
    """The vault id the store is encrypted with: ``chosen`` (``fabric_chap_vault_id``), else ``stored`` (the id in
    the existing store's header), else the only id this run loaded. Pure; the caller decides before it decrypts or
    writes anything.

    ``lab_ids`` are the ids that are the lab's (named ``lab``, or whose password is the lab's committed one):
    anyone can open what they encrypt, so they are refused for a store that is not the lab inventory's
    (``lab_store`` false). Several ids loaded and none chosen is refused too: the store's id would be a guess
    (Ansible's own rule encrypts with the first one loaded)."""
    ids = list(dict.fromkeys(str(i) for i in loaded))
    if not ids:
        raise UserError("no Ansible Vault secret is loaded, so the per-host CHAP secrets cannot be kept",
                        "run with the inventory's own vault id (--vault-id NAME@prompt or @FILE, or "
                        "ANSIBLE_VAULT_IDENTITY_LIST=NAME@FILE) and set fabric_chap_vault_id: NAME")
    if chosen:
        if chosen not in ids:
            raise UserError(f"fabric_chap_vault_id is {chosen!r}, but this run loaded no vault secret with that id "
                            f"(loaded: {', '.join(ids)})",
                            f"run with --vault-id {chosen}@prompt (or @FILE), or set fabric_chap_vault_id to the "
                            "inventory's own vault id")
        vault_id = chosen
    elif stored:
        vault_id = stored
    elif len(ids) == 1:
        vault_id = ids[0]
    else:
        raise UserError(f"several vault ids are loaded ({', '.join(ids)}) and fabric_chap_vault_id names none, so "
                        "the CHAP store's vault id would be a guess (nothing was written)",
                        "set fabric_chap_vault_id to this inventory's own vault id (group_vars/all, e.g. "
                        "fabric_chap_vault_id: prod), or run with that --vault-id only")
    lab = set(lab_ids) | {LAB_VAULT_ID}
    if not lab_store:
        for what, vid in (("would be encrypted", vault_id), ("is encrypted", stored)):
            if vid and vid in lab:
                raise UserError(
                    f"the CHAP store of this inventory {what} with the lab's vault id {vid!r}, whose password is "
                    "committed in the repository: anyone could read its secrets (nothing was written)",
                    "run this inventory with its own vault id only (--vault-id prod@prompt, or "
                    "ANSIBLE_VAULT_IDENTITY_LIST=prod@FILE; never the lab's) and set fabric_chap_vault_id: prod; "
                    "a store already encrypted with the lab's id: rekey it (ansible-vault rekey --new-vault-id "
                    "prod@prompt FILE) and rotate every host's secrets (fabric_chap_rotate), they are known")
    return vault_id
