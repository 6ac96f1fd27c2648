"""fabric_core.base.chap (per-host CHAP secrets: where each host's pair comes from) and the fabric_chap action
plugin's vault store (encrypted, 0600, atomic)."""

from __future__ import annotations

import stat
import string
from pathlib import Path

import pytest
from fabric_core.base import chap
from fabric_core.base.errors import UserError
from fabric_core.base.rules import LIO, chap_secret_ok
from support import load_file

REPO = Path(__file__).resolve().parents[2]
GIVEN = {"gpu1": {"password": "given-gpu1-pass", "mutual_password": "given-gpu1-mutu"}}


def test_a_generated_secret_is_within_lio_limits_and_the_alphabet():
    for _ in range(200):
        secret = chap.generate_secret()
        assert len(secret) == chap.SECRET_LENGTH and set(secret) <= set(chap.ALPHABET) and chap_secret_ok(secret)
    assert not set(chap.ALPHABET) & set(string.whitespace + "'\"\\$`#:")  # nothing a shell, YAML or a record mangles
    assert chap.BITS > 96  # RFC 3720's recommendation
    pair = chap.generate_pair()
    assert pair["password"] != pair["mutual_password"]


def test_given_secrets_win_and_missing_hosts_are_generated_once():
    out = chap.resolve(["gpu1", "gpu2"], given=GIVEN, stored={})
    assert out["secrets"]["gpu1"] == GIVEN["gpu1"] and out["generated"] == ["gpu2"] and out["rotated"] == []
    assert "gpu1" not in out["store"] and set(out["store"]["gpu2"]) == {"password", "mutual_password", "rotation"}
    again = chap.resolve(["gpu1", "gpu2"], given=GIVEN, stored=out["store"])
    assert again["generated"] == [] and again["secrets"] == out["secrets"] and again["store"] == out["store"]


def test_a_rotation_happens_once_per_id_and_overrides_the_vault():
    first = chap.resolve(["gpu1", "gpu2"], given=GIVEN, stored={}, rotate={"gpu1": "2026-11"})
    assert first["rotated"] == ["gpu1"] and first["secrets"]["gpu1"] != GIVEN["gpu1"]
    same = chap.resolve(["gpu1", "gpu2"], given=GIVEN, stored=first["store"], rotate={"gpu1": "2026-11"})
    assert same["rotated"] == [] and same["secrets"] == first["secrets"]
    later = chap.resolve(["gpu1", "gpu2"], given=GIVEN, stored=first["store"], rotate={"gpu1": "2026-12"})
    assert later["rotated"] == ["gpu1"] and later["secrets"]["gpu1"] != first["secrets"]["gpu1"]
    assert later["secrets"]["gpu2"] == first["secrets"]["gpu2"]  # other hosts keep theirs


def test_a_shared_or_malformed_secret_is_refused_without_showing_it():
    shared = {"gpu1": GIVEN["gpu1"], "gpu2": dict(GIVEN["gpu1"])}
    with pytest.raises(UserError) as err:
        chap.resolve(["gpu1", "gpu2"], given=shared, stored={})
    assert "share a CHAP secret" in str(err.value) and "given-gpu1" not in str(err.value)
    with pytest.raises(UserError) as err:
        chap.resolve(["gpu1"], given={"gpu1": {"password": "short", "mutual_password": "given-gpu1-mutu"}}, stored={})
    assert "gpu1.password" in str(err.value) and "short" not in str(err.value)
    with pytest.raises(UserError):
        chap.resolve(["gpu1"], given={"gpu1": {"password": "same-same-same", "mutual_password": "same-same-same"}},
                     stored={})
    with pytest.raises(UserError):
        chap.resolve(["GPU_1"], given={}, stored={})


def test_credentials_in_lio_names():
    fields = chap.credentials("gpu1", GIVEN["gpu1"], target_userid="fabric-target").fields(LIO, compact=True)
    assert fields == {"userid": "gpu1", "password": "given-gpu1-pass", "mutual_userid": "fabric-target",
                      "mutual_password": "given-gpu1-mutu"}
    one_way = chap.credentials("gpu1", GIVEN["gpu1"], mutual=False).fields(LIO, compact=True)
    assert one_way == {"userid": "gpu1", "password": "given-gpu1-pass"}


def test_the_store_is_vault_encrypted_private_and_round_trips(tmp_path):
    from ansible.parsing.vault import VaultLib, VaultSecret
    plugin = load_file(REPO / "plugins" / "action" / "fabric_chap.py", "fabric_chap_plugin")
    vault = VaultLib([("lab", VaultSecret(b"unit-test-vault-password"))])
    path = tmp_path / "fabric-chap.vault.yml"
    store = plugin.Store(str(path), vault, None)
    assert store.read() == {}
    data = chap.resolve(["gpu2"], given={}, stored={})["store"]
    with store.locked():
        store.write(data)
    raw = path.read_bytes()
    assert raw.startswith(b"$ANSIBLE_VAULT;1.2;AES256;lab")
    assert data["gpu2"]["password"].encode() not in raw
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert plugin.Store(str(path), vault, None).read() == data
    assert not list(tmp_path.glob(".fabric-chap.*"))  # no temporary file left behind
