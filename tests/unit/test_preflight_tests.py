"""plugins/test/fabric.py: the roles' preflights test values with the core library's rules (``x is fabric_iqn``).

Each Jinja test agrees with the rule it stands for, and the preflight asserts of the iscsi_initiator,
lio_target and fabricctl roles, run by ansible-playbook on this machine with the lab's values, pass,
while a value the core refuses fails the assert that checks it (with the assert's own message)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support import load_file

REPO = Path(__file__).resolve().parents[2]
SECRET, OTHER = "s3cret-s3cret", "other-s3cret"


def plugin():
    return load_file(REPO / "plugins" / "test" / "fabric.py", "fabric_test_plugin").TestModule().tests()


@pytest.mark.parametrize("test, good, bad", [
    ("fabric_iqn", "iqn.2026-11.io.fabric.lab:gpu1", "iqn.2026-11.lab:GPU1"),
    ("fabric_iqn", "eui.0123456789ABCDEF", "iqn.2026-11.io.fabric.lab:gpu_1"),
    ("fabric_iqn_base", "iqn.2026-11.io.fabric.lab", "iqn.2026-11.io.fabric.lab:x"),
    ("fabric_pool_name", "tank", "mirror1"),
    ("fabric_hostname", "gpu1", "GPU_1"),
    ("fabric_target_name", "storage1-exports", "S_1"),
    ("fabric_backstore_prefix", "fctl_", "a/b"),
    ("fabric_user_name", "root", "Root"),
    ("fabric_metric_name", "loss", "Loss"),
    ("fabric_export_name", "welcome", "Welcome"),
    ("fabric_portal", "10.77.0.11:3260", "storage1"),
    ("fabric_chap_secret", SECRET, "short"),
    ("fabric_path", "/var/lib/fabricctl", "/var/lib/../x"),
    ("fabric_mount_root", "/datasets", "/usr"),
    ("fabric_filesystem", "xfs", "btrfs"),
])
def test_each_jinja_test_is_its_rule(test, good, bad):
    fn = plugin()[test]
    assert fn(good) is True and fn(bad) is False and fn(None) is False


def test_dataset_names_inside_a_pool_and_chap_in_both_views():
    tests = plugin()
    assert tests["fabric_dataset_name"]("tank/datasets", "tank") and not tests["fabric_dataset_name"]("tank", "tank")
    assert not tests["fabric_dataset_name"]("other/datasets", "tank") and tests["fabric_dataset_name"]("other/x")
    lio = {"userid": "gpu1", "password": SECRET, "mutual_userid": "s1", "mutual_password": OTHER}
    assert tests["fabric_chap"](lio) and tests["fabric_chap"]({}) and tests["fabric_chap"](lio, "lio")
    assert not tests["fabric_chap"](dict(lio, mutual_password=SECRET))
    assert tests["fabric_chap"]({"username": "u", "password": "p"}, "open-iscsi")
    assert not tests["fabric_chap"]({"username": "u"}, "open-iscsi")
    assert not tests["fabric_chap"]({"username_in": "x", "password_in": "y"}, "open-iscsi")


# --- the preflights themselves, through ansible-playbook ------------------------------------------

def asserts_of(role: str, names: list[str]) -> list[dict]:
    """The named assert tasks of a role's preflight, each registering its result instead of failing, after the
    preflight's facts that give the asserts the values without their secrets (the "... without their secrets"
    set_fact tasks the asserts loop over)."""
    tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "preflight.yml").read_text())
    prepare = [t for t in tasks if "without their secrets" in t.get("name", "") and "ansible.builtin.set_fact" in t]
    chosen: list[dict] = []
    for name in names:
        task = copy.deepcopy(next(t for t in tasks if t.get("name") == name and "ansible.builtin.assert" in t))
        task.pop("no_log", None)
        chosen.append(dict(task, ignore_errors=True, register=f"r{len(chosen)}"))
    return [*prepare, *chosen]


def run_asserts(tmp_path, role: str, names: list[str], variables: dict) -> tuple[list[bool], str]:
    """(failed? per assert task, the playbook's output)."""
    tasks = asserts_of(role, names)
    count = sum(1 for t in tasks if "register" in t)
    report = "{{ [" + ", ".join(f"r{i}.failed | default(false)" for i in range(count)) + "] | to_json }}"
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}
    play = [{"hosts": "localhost", "gather_facts": False, "vars": {**defaults, **variables},
             "tasks": [*tasks, {"ansible.builtin.debug": {"msg": "FAILED=" + report}}]}]
    path = tmp_path / "preflight.yml"
    path.write_text(yaml.safe_dump(play))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(path)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_STRATEGY": "linear",
                               "ANSIBLE_STDOUT_CALLBACK": "default"})
    line = next((ln for ln in proc.stdout.splitlines() if "FAILED=" in ln), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line.split("FAILED=", 1)[1].strip().strip('"').replace('\\"', '"')), proc.stdout


EXPORT = {"name": "welcome", "portal": "10.77.0.11", "target_iqn": "iqn.2026-11.io.fabric.lab:storage1-exports",
          "fstype": "ext4", "chap": {"username": "gpu1", "password": SECRET, "username_in": "s1",
                                     "password_in": OTHER}}
INITIATOR = ["Preflight | initiator name is a valid IQN", "Preflight | iscsid settings are sane",
             "Preflight | each export is complete and valid", "Preflight | default CHAP credentials are complete"]


def test_iscsi_initiator_preflight(tmp_path):
    good = {"iscsi_initiator_iqn": "iqn.2026-11.io.fabric.lab:gpu1", "iscsi_initiator_exports": [EXPORT]}
    assert run_asserts(tmp_path, "iscsi_initiator", INITIATOR, good)[0] == [False] * 4
    bad = dict(good, iscsi_initiator_iqn="iqn.2026-11.lab:GPU1", iscsi_initiator_chap_username_in="x",
               iscsi_initiator_exports=[dict(EXPORT, portal="storage1"), dict(EXPORT, name="b", mountpoint="/usr")])
    failed, out = run_asserts(tmp_path, "iscsi_initiator", INITIATOR, bad)
    assert failed == [True, False, True, True]
    assert "is not a valid iSCSI name" in out and "export welcome is invalid" in out and "export b is invalid" in out


LIO_TARGET = ["Preflight | base IQN looks valid", "Preflight | target names are unique and valid",
              "Preflight | initiator IQNs look valid",
              "Preflight | CHAP given in an ACL is complete, with 12-16 character secrets"]
TARGET = {"name": "storage1-exports", "luns": [{"name": "welcome", "device": "/dev/zvol/tank/exports/welcome"}],
          "acls": [{"initiator": "iqn.2026-11.io.fabric.lab:gpu1",
                    "chap": {"userid": "gpu1", "password": SECRET, "mutual_userid": "s1", "mutual_password": OTHER}}]}


def test_lio_target_preflight(tmp_path):
    good = {"lio_target_base_iqn": "iqn.2026-11.io.fabric.lab", "lio_target_targets": [TARGET]}
    assert run_asserts(tmp_path, "lio_target", LIO_TARGET, good)[0] == [False] * 4
    acl = {"initiator": "iqn.2026-11.io.fabric.lab:gpu_1", "chap": {"userid": "u", "password": "short"}}
    bad = {"lio_target_base_iqn": "iqn.2026-11.io.fabric.lab:x", "lio_target_targets": [dict(TARGET, name="S_1",
                                                                                              acls=[acl])]}
    failed, out = run_asserts(tmp_path, "lio_target", LIO_TARGET, bad)
    assert failed == [True, True, True, True] and "must look like iqn.YYYY-MM.reversed.domain" in out


FABRICCTL = ["Preflight | ZFS names and the IQN base look valid",
             "Preflight | paths are absolute and mount roots are not system directories",
             "Preflight | SSH settings and limits are sane",
             "Preflight | every GPU node has a valid name, address and initiator",
             "Preflight | no CHAP secret shared by every GPU node (fabricctl_chap is gone)"]


def test_fabricctl_preflight(tmp_path):
    good = {"fabric_iqn_base": "iqn.2026-11.io.fabric.lab", "fabricctl_metrics": ["loss", "accuracy"],
            "__fabricctl_hosts": {"gpu1": {"address": "10.77.0.21", "initiator": "iqn.2026-11.io.fabric.lab:gpu1"}}}
    assert run_asserts(tmp_path, "fabricctl", FABRICCTL, good)[0] == [False] * 5
    bad = dict(good, fabricctl_dataset_root="tank", fabricctl_staging_root="/srv", fabricctl_default_fs="btrfs",
               __fabricctl_hosts={"gpu1": {"address": "10.77.0.21", "initiator": "iqn.2026-11.io.fabric.lab:GPU1"}},
               fabricctl_chap={"userid": "fabricctl", "password": SECRET})
    failed, out = run_asserts(tmp_path, "fabricctl", FABRICCTL, bad)
    assert failed == [True, True, True, True, True]
    assert "fabricctl_staging_root (/srv) must be an absolute, normalised path" in out


def test_lio_target_acl_without_chap_is_refused_unless_insecure(tmp_path):
    """An ACL with no chap of its own and no GPU node (no per-host secret) is refused: anyone setting the
    initiator name would be let in; a GPU node's initiator gets its per-host secret; fabric_insecure_no_chap allows."""
    check = ["Preflight | every ACL has CHAP, its own or its GPU node's (unless fabric_insecure_no_chap)"]
    bare = dict(TARGET, acls=[{"initiator": "iqn.2026-11.io.fabric.lab:gpu1"}])
    base = {"lio_target_base_iqn": "iqn.2026-11.io.fabric.lab", "lio_target_targets": [bare],
            "__lio_target_chap": {"initiators": {}, "chap": {}}}
    failed, out = run_asserts(tmp_path, "lio_target", check, base)
    assert failed == [True] and "has no CHAP" in out and "fabric_insecure_no_chap" in out
    known = dict(base, __lio_target_chap={"initiators": {"iqn.2026-11.io.fabric.lab:gpu1": "gpu1"}, "chap": {}})
    assert run_asserts(tmp_path, "lio_target", check, known)[0] == [False]
    assert run_asserts(tmp_path, "lio_target", check, dict(base, fabric_insecure_no_chap=True))[0] == [False]


# --- their documentation (ansible-doc -t test gpufabric.storage.NAME) -------------------------------

def test_every_jinja_test_is_documented_by_its_sidecar_file():
    """plugins/test/NAME.yml for each test (ansible-core's way for several tests in one file): its name, one option
    per argument after the value, a boolean _value."""
    import inspect

    docs = {path.stem: yaml.safe_load(path.read_text()) for path in (REPO / "plugins" / "test").glob("*.yml")}
    tests = plugin()
    assert sorted(docs) == sorted(tests)
    for name, fn in tests.items():
        doc = docs[name]
        assert doc["DOCUMENTATION"]["name"] == name and doc["DOCUMENTATION"]["short_description"]
        assert doc["RETURN"]["_value"]["type"] == "boolean"
        arguments = list(inspect.signature(fn).parameters)[1:]
        assert sorted(doc["DOCUMENTATION"]["options"]) == sorted(["_input", *arguments]), name
        yaml.safe_load(doc["EXAMPLES"])  # the examples are tasks


def test_the_documented_examples_hold():
    """Every example assertion on literal values (`'tank' is gpufabric.storage.fabric_pool_name`) is true."""
    import jinja2
    from jinja2 import meta

    env = jinja2.Environment()
    env.tests.update({f"gpufabric.storage.{name}": fn for name, fn in plugin().items()})
    checked = 0
    for path in (REPO / "plugins" / "test").glob("*.yml"):
        for task in yaml.safe_load(yaml.safe_load(path.read_text())["EXAMPLES"]):
            for expression in task["ansible.builtin.assert"]["that"]:
                if meta.find_undeclared_variables(env.parse("{{ " + expression + " }}")):
                    continue  # a role's variable
                assert env.compile_expression(expression)() is True, f"{path.name}: {expression}"
                checked += 1
    assert checked >= 40


def test_ansible_doc_lists_every_jinja_test_as_documented():
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-doc"), "-t", "test", "-l", "gpufabric.storage"],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    listed = [line for line in proc.stdout.splitlines() if line.startswith("gpufabric.storage.")]
    assert len(listed) == len(plugin()) and not [line for line in listed if "UNDOCUMENTED" in line], proc.stdout
