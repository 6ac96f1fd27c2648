"""One rule for a GPU node's initiator name (issue 28, item 2): ``fabric_core.base.names.initiator_name`` makes it,
``plugin_utils.inventory.initiator_of`` says which inventory variables count, and every place that names a GPU
node's initiator asks them: the filter ``gpufabric.storage.fabric_initiator_name`` (the iscsi_initiator role's
default, the fabricctl role's list of hosts, the lab's ACLs), the controller plugins and fabricctl's
configuration. Checked through ansible-playbook, so an inventory that sets one base and not the other gives one
answer everywhere, and one that sets both differently is refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufabric.storage.plugins.filter.fabric import FilterModule, fabric_initiator_name
from ansible_collections.gpufabric.storage.plugins.plugin_utils import inventory
from fabric_core.base import names
from fabric_core.base.errors import UserError

from fabricctl import config

REPO = Path(__file__).resolve().parents[2]
BASE, OTHER = "iqn.2026-11.com.example", "iqn.2026-11.org.example"


# --- the filter -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variables, expected", [
    ({"fabric_iqn_base": BASE}, f"{BASE}:gpu1"),
    ({"iscsi_initiator_iqn_base": BASE}, f"{BASE}:gpu1"),  # the deprecated former name, alone
    ({"fabric_iqn_base": BASE, "iscsi_initiator_iqn_base": BASE}, f"{BASE}:gpu1"),  # both, the same
    ({"fabric_iqn_base": BASE, "iscsi_initiator_iqn": f"{OTHER}:node-17"}, f"{OTHER}:node-17"),  # set: as it is
    ({"fabric_iqn_base": BASE, "iscsi_initiator_iqn": ""}, f"{BASE}:gpu1"),  # empty counts as not set
    ({}, f"{inventory.DEFAULT_BASE}:gpu1"),
])
def test_the_filter_gives_the_rule_of_the_host_variables(variables, expected):
    assert fabric_initiator_name(variables, "gpu1") == expected
    assert FilterModule().filters()["fabric_initiator_name"] is fabric_initiator_name


def test_the_filter_is_the_core_rule_for_any_host_name():
    for host in ("gpu1", "GPU1", "gpu_1", "node-7.rack3"):
        assert fabric_initiator_name({"fabric_iqn_base": BASE}, host) == names.initiator_name(BASE, host)
    assert fabric_initiator_name({"fabric_iqn_base": BASE}, "GPU1") == f"{BASE}:gpu1"  # lower case, no digest


def test_two_bases_that_differ_are_refused_naming_both():
    with pytest.raises(AnsibleFilterError) as err:
        fabric_initiator_name({"fabric_iqn_base": BASE, "iscsi_initiator_iqn_base": OTHER}, "gpu1")
    text = str(err.value)
    assert BASE in text and OTHER in text and "fabric_iqn_base" in text and "iscsi_initiator_iqn_base" in text
    assert "set only fabric_iqn_base" in text


@pytest.mark.parametrize("variables, hostname, message", [
    ({"iscsi_initiator_iqn": "iqn.2026-11.lab:GPU1"}, "gpu1", "iqn.2026-11.lab:GPU1"),  # an invalid explicit name
    ({"fabric_iqn_base": f"{BASE}:x"}, "gpu1", "fabric_initiator_name"),  # a base with a unique part
    ("gpu1", "gpu1", "hostvars[HOST]"),  # not a host's variables
    ({"fabric_iqn_base": BASE}, "", "inventory name"),
])
def test_bad_input_is_an_error_naming_the_problem(variables, hostname, message):
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        fabric_initiator_name(variables, hostname)


def test_the_controller_plugins_ask_the_same_resolution():
    class Hv:  # plugin_utils.inventory.HostVars: the host's inventory values, templated
        def __init__(self, values):
            self.values = values

        def get(self, key, default=None):
            return self.values.get(key, default)

    for variables in ({"fabric_iqn_base": BASE}, {"iscsi_initiator_iqn_base": BASE}, {}):
        assert inventory.initiator_name(Hv(variables), "gpu7") == fabric_initiator_name(variables, "gpu7")
    with pytest.raises(Exception, match="two bases") as err:  # the collection's own UserError
        inventory.initiator_name(Hv({"fabric_iqn_base": BASE, "iscsi_initiator_iqn_base": OTHER}), "gpu7")
    assert type(err.value).__name__ == "UserError" and "set only fabric_iqn_base" in err.value.fix


# --- fabricctl's configuration ----------------------------------------------------------------------------

CHAP = {"userid": "gpu1", "password": "s3cret-s3cret-1"}


def test_fabricctl_derives_a_missing_initiator_by_the_rule():
    raw = {"pool": "tank", "iqn_base": f"{BASE}.fabricctl", "portal": {"ip": "10.77.0.11"},
           "initiator_base": BASE, "hosts": {"gpu1": {"address": "10.77.0.21", "chap": CHAP},
                                             "gpu2": {"address": "10.77.0.22", "initiator": f"{OTHER}:n2",
                                                      "chap": dict(CHAP, userid="gpu2", password="s3cret-s3cret-2")}}}
    cfg = config.from_dict(raw)
    assert cfg.hosts["gpu1"].initiator == names.initiator_name(BASE, "gpu1") == fabric_initiator_name(
        {"fabric_iqn_base": BASE}, "gpu1")
    assert cfg.hosts["gpu2"].initiator == f"{OTHER}:n2"  # given: as it is
    del raw["initiator_base"]
    with pytest.raises(UserError) as err:
        config.from_dict(raw)
    assert "hosts.gpu1.initiator" in err.value.problem and "initiator_base" in err.value.fix


# --- every place, through ansible-playbook ----------------------------------------------------------------

def _fabricctl_derivation() -> dict:
    """The fabricctl role's preflight task that lists the GPU nodes with their initiator names."""
    tasks = yaml.safe_load((REPO / "roles" / "fabricctl" / "tasks" / "preflight.yml").read_text())
    return next(t for t in tasks if t.get("name", "").startswith("Preflight | the GPU nodes fabricctl reaches"))


def run_everywhere(tmp_path: Path, group_vars: dict, host_vars: dict) -> tuple[int, dict, str]:
    """(rc, {"role": {host: name}, "fabricctl": {...}, "lab_acls": {...}}, output) on a two-GPU-node inventory:
    the iscsi_initiator role's default (its defaults file), the fabricctl role's preflight task, the lab's ACLs."""
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "host_vars").mkdir(exist_ok=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "gpu_nodes": {"hosts": {"gpu1": None, "gpu2": None}}, "storage_nodes": {"hosts": {"storage1": None}}},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}))
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(
        {**group_vars, "vault_fabric_chap": {h: {"password": "p", "mutual_password": "m"} for h in ("gpu1", "gpu2")}}))
    for host, values in host_vars.items():
        (inv / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(values))
    role_defaults = yaml.safe_load((REPO / "roles" / "iscsi_initiator" / "defaults" / "main.yml").read_text())
    fabricctl_defaults = yaml.safe_load((REPO / "roles" / "fabricctl" / "defaults" / "main.yml").read_text())
    lab = yaml.safe_load((REPO / "inventory" / "lab" / "group_vars" / "storage_nodes.yml").read_text())
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)

    def write(name: str, value: str) -> dict:  # every host is local: the file is on this machine
        return {"ansible.builtin.copy": {"content": "{{ " + value + " | to_json }}", "dest": f"{out}/{name}",
                                         "mode": "0600"}}

    play = [
        {"hosts": "gpu_nodes", "gather_facts": False,
         "vars": {"iscsi_initiator_iqn": role_defaults["iscsi_initiator_iqn"]},
         "tasks": [write("role-{{ inventory_hostname }}.json", "iscsi_initiator_iqn")]},
        {"hosts": "storage1", "gather_facts": False,
         "vars": {"fabricctl_hosts": {}, "fabricctl_host_group": fabricctl_defaults["fabricctl_host_group"],
                  "__lab_acls_json": lab["__lab_acls_json"]},
         "tasks": [_fabricctl_derivation(), write("fabricctl.json", "__fabricctl_hosts"),
                   write("lab.json", "__lab_acls_json | from_json")]},
    ]
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump(play))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(path)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_STRATEGY": "linear",
                               "ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_FORKS": "1"})
    found: dict = {"role": {p.stem.removeprefix("role-"): json.loads(p.read_text()) for p in out.glob("role-*.json")}}
    if (out / "fabricctl.json").exists():
        found["fabricctl"] = {h: v["initiator"] for h, v in json.loads((out / "fabricctl.json").read_text()).items()}
    if (out / "lab.json").exists():
        found["lab_acls"] = {a["chap"]["userid"]: a["initiator"] for a in json.loads((out / "lab.json").read_text())}
    return proc.returncode, found, proc.stdout + proc.stderr


@pytest.mark.parametrize("group_vars", [{"fabric_iqn_base": BASE}, {"iscsi_initiator_iqn_base": BASE}],
                         ids=["the base", "its deprecated former name"])
def test_one_base_set_gives_one_answer_everywhere(tmp_path, group_vars):
    rc, found, out = run_everywhere(tmp_path, group_vars, {"gpu2": {"iscsi_initiator_iqn": f"{OTHER}:node-2"}})
    assert rc == 0, out[-3000:]
    expected = {"gpu1": names.initiator_name(BASE, "gpu1"), "gpu2": f"{OTHER}:node-2"}
    assert found == {"role": expected, "fabricctl": expected, "lab_acls": expected}, out[-3000:]


def test_two_different_bases_are_refused_everywhere(tmp_path):
    rc, found, out = run_everywhere(tmp_path, {"fabric_iqn_base": BASE, "iscsi_initiator_iqn_base": OTHER}, {})
    assert rc != 0 and found == {"role": {}}
    assert "two bases for one initiator name" in out and "set only fabric_iqn_base" in out


# --- no other rule anywhere -------------------------------------------------------------------------------

# "<a base>:<a host>" written out in Jinja (`{{ base }}:{{ inventory_hostname }}`, `base ~ ':' ~ h`)
_JINJA_RULE = re.compile(r"iqn_base\s*\)*\s*(\}\}\s*:\s*\{\{|~\s*['\"]:['\"]\s*~)\s*(inventory_hostname|h|gpu|host|"
                         r"item|name)\b")
# the same in Python: an initiator name made of "{base}:{host}" on the line (target names are made so too)
_PYTHON_RULE = re.compile(r"^.*initiator.*f\"\{[^}\"]+\}:\{[^}\"]+\}\".*$", re.IGNORECASE | re.MULTILINE)


def _files(*patterns: str) -> list[Path]:
    skip = {".venv", ".ansible", "build", ".git", "collections"}
    return [p for pattern in patterns for p in REPO.glob(pattern) if not skip & set(p.relative_to(REPO).parts)]


def test_no_role_inventory_or_playbook_writes_the_rule_out_itself():
    files = _files("roles/**/*.yml", "roles/**/*.j2", "inventory/**/*.yml", "playbooks/**/*.yml")
    found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in files for m in _JINJA_RULE.finditer(p.read_text())]
    assert found == [], "use hostvars[HOST] | gpufabric.storage.fabric_initiator_name(HOST) instead"


def test_no_python_writes_the_rule_out_itself():
    rule = REPO / "plugins" / "module_utils" / "fabric_core" / "base" / "names.py"
    found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in _files("plugins/**/*.py", "fabricctl/**/*.py",
                                                                    "fabric_node/**/*.py")
             if p != rule for m in _PYTHON_RULE.finditer(p.read_text())]
    assert found == [], "use fabric_core.base.names.initiator_name"
    core = REPO / "plugins" / "module_utils" / "fabric_core"
    assert not [p for p in core.rglob("*.py") if re.search(r"def (host_iqn|initiator_name)\b", p.read_text())
                and p != rule]


def test_the_places_that_name_a_gpu_nodes_initiator_ask_the_filter():
    filter_name = "gpufabric.storage.fabric_initiator_name"
    for place in ("roles/iscsi_initiator/defaults/main.yml", "roles/fabricctl/tasks/preflight.yml",
                  "inventory/lab/group_vars/storage_nodes.yml"):
        assert filter_name in (REPO / place).read_text(), place
    for plugin in ("plugins/action/fabric_chap.py", "plugins/action/fabric_site_invariants.py"):
        assert "initiator_name(" in (REPO / plugin).read_text(), plugin  # plugin_utils.inventory.initiator_name
