"""plugins/modules/fabric_config_keys.py in-process on a copy of Debian 13's /etc/iscsi/iscsid.conf
(tests/unit/data/conffile/iscsid.conf, recorded from the lab image; see its README). The module runs no
command: run_module's empty script fails any."""

from __future__ import annotations

import stat

import pytest
import yaml
from support import DATA, load_module, run_module

ISCSID = (DATA / "conffile" / "iscsid.conf").read_text()
# the iscsi_initiator role's keys with its defaults (roles/iscsi_initiator/defaults/main.yml), and a shorter
# replacement timeout than the package's 120
SETTINGS = {"node.startup": "automatic", "node.session.timeo.replacement_timeout": 15,
            "node.conn[0].timeo.noop_out_interval": 5, "node.conn[0].timeo.noop_out_timeout": 5}
CHANGES = {"node.startup": {"before": "manual", "after": "automatic"},
           "node.session.timeo.replacement_timeout": {"before": "120", "after": "15"}}


@pytest.fixture
def conf(tmp_path):
    path = tmp_path / "iscsid.conf"
    path.write_text(ISCSID)
    path.chmod(0o600)
    return path


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    return [(b, a) for b, a in zip(before.splitlines(), after.splitlines(), strict=True) if b != a]


def test_sets_the_keys_in_place_with_the_diff_and_keeps_every_other_line(conf):
    out = run_module("fabric_config_keys", {"path": str(conf), "settings": SETTINGS}, diff=True)
    assert out["changed"] is True and "failed" not in out and out["_commands"] == []
    assert out["changes"] == CHANGES
    written = conf.read_text()
    assert changed_lines(ISCSID, written) == [("node.startup = manual", "node.startup = automatic"),
                                              ("node.session.timeo.replacement_timeout = 120",
                                               "node.session.timeo.replacement_timeout = 15")]
    assert out["diff"] == {"before": ISCSID, "after": written, "before_header": str(conf), "after_header": str(conf)}
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600  # the package's mode kept
    assert [p.name for p in conf.parent.iterdir()] == ["iscsid.conf"]  # no temporary file left behind
    again = run_module("fabric_config_keys", {"path": str(conf), "settings": SETTINGS}, diff=True)
    assert again["changed"] is False and again["changes"] == {}
    assert again["diff"]["before"] == again["diff"]["after"] == written and conf.read_text() == written


def test_a_commented_default_becomes_the_active_line_and_an_unknown_key_is_appended(conf):
    out = run_module("fabric_config_keys", {"path": str(conf), "settings": {
        "node.session.auth.chap_algs": "SHA256,MD5", "iscsid.fabric_test": True}})
    assert out["changes"] == {"node.session.auth.chap_algs": {"before": None, "after": "SHA256,MD5"},
                              "iscsid.fabric_test": {"before": None, "after": "Yes"}}  # booleans: open-iscsi's Yes/No
    written = conf.read_text()
    assert "#node.session.auth.chap_algs" not in written and "\nnode.session.auth.chap_algs = SHA256,MD5\n" in written
    assert written.endswith("# Set by the gpu-storage-fabric roles (keys edited in place; the rest is the "
                            "package's).\niscsid.fabric_test = Yes\n")


def test_check_mode_reports_the_changes_and_diff_and_writes_nothing(conf):
    before = conf.stat()
    out = run_module("fabric_config_keys", {"path": str(conf), "settings": SETTINGS}, check_mode=True, diff=True)
    assert out["changed"] is True and out["changes"] == CHANGES
    assert out["diff"]["before"] == ISCSID and len(changed_lines(ISCSID, out["diff"]["after"])) == 2
    assert conf.read_text() == ISCSID and conf.stat().st_mtime_ns == before.st_mtime_ns
    assert [p.name for p in conf.parent.iterdir()] == ["iscsid.conf"]


def test_a_missing_file_is_refused_and_not_created(tmp_path):
    path = tmp_path / "iscsi" / "iscsid.conf"
    out = run_module("fabric_config_keys", {"path": str(path), "settings": SETTINGS})
    assert out["failed"] is True and not out.get("changed")
    assert f"{path} does not exist" in out["msg"] and "fix: install the package that provides it first" in out["msg"]
    assert not path.exists() and not path.parent.exists()


@pytest.mark.parametrize("settings, problem", [
    ({"node startup": "automatic"}, "invalid configuration key 'node startup'"),
    ({"node.startup": "automatic\nnode.session.timeo.replacement_timeout = 1"}, "has a line break"),
])
def test_bad_settings_are_refused_and_the_file_is_untouched(conf, settings, problem):
    out = run_module("fabric_config_keys", {"path": str(conf), "settings": settings})
    assert out["failed"] is True and problem in out["msg"]
    assert conf.read_text() == ISCSID


def test_module_documentation_parses_and_matches_the_argument_spec():
    module = load_module("fabric_config_keys")
    doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc["module"] == "fabric_config_keys"
    assert set(doc["options"]) == {"path", "settings", "separator"}
    assert doc["attributes"]["check_mode"]["support"] == "full" and doc["attributes"]["diff_mode"]["support"] == "full"
    assert all(task.get("name") for task in yaml.safe_load(module.EXAMPLES))
    assert set(yaml.safe_load(module.RETURN)) == {"changes"}
