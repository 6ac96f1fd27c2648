"""fabric_core.base.conffile: keys of a packaged configuration file set in place, on open-iscsi's own
iscsid.conf (Debian 13's, open-iscsi 2.1.11, recorded from the lab image)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from fabric_core.base import conffile
from fabric_core.base.errors import UserError
from fabric_core.base.runner import Runner

ISCSID = (Path(__file__).parent / "data" / "conffile" / "iscsid.conf").read_text()
FABRIC = {"node.startup": "automatic", "node.session.timeo.replacement_timeout": 120,
          "node.conn[0].timeo.noop_out_interval": 5, "node.conn[0].timeo.noop_out_timeout": 5}


def active(text: str, key: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(key + " ") or line.startswith(key + "=")]


def test_the_fabric_keys_are_set_and_every_other_line_is_the_packages():
    after, changes = conffile.set_keys(ISCSID, FABRIC)
    assert active(after, "node.startup") == ["node.startup = automatic"]
    assert active(after, "node.session.timeo.replacement_timeout") == ["node.session.timeo.replacement_timeout = 120"]
    before_lines, after_lines = ISCSID.splitlines(), after.splitlines()
    assert len(after_lines) == len(before_lines)  # every key exists in the package's file: nothing appended
    differ = [(b, a) for b, a in zip(before_lines, after_lines, strict=True) if b != a]
    assert {a for _, a in differ} <= {f"{k} = {v}" for k, v in FABRIC.items()}
    assert "node.startup" in changes and changes["node.startup"][1] == "automatic"
    assert conffile.set_keys(after, FABRIC) == (after, {})  # a second pass changes nothing


def test_a_commented_default_is_replaced_and_a_missing_key_appended_once():
    after, changes = conffile.set_keys(ISCSID, {"node.session.auth.chap_algs": "SHA256,MD5",
                                                "iscsid.fabric_test": "x"})
    assert active(after, "node.session.auth.chap_algs") == ["node.session.auth.chap_algs = SHA256,MD5"]
    assert "#node.session.auth.chap_algs" not in after  # the documented default line became the active one
    assert after.endswith(f"{conffile.MARKER}\niscsid.fabric_test = x\n")
    assert changes["iscsid.fabric_test"] == (None, "x")
    again, _ = conffile.set_keys(after, {"iscsid.fabric_test": "y"})
    assert again.count(conffile.MARKER) == 1 and again.endswith("iscsid.fabric_test = y\n")


def test_active_duplicates_are_commented_out():
    text = "a = 1\nb = 2\na = 3\n"
    after, changes = conffile.set_keys(text, {"a": "1"})
    assert after == "a = 1\nb = 2\n# a = 3\n" and "a" in changes


@pytest.mark.parametrize("settings", [{"bad key": 1}, {"k": "two\nlines"}])
def test_bad_input_is_refused(settings):
    with pytest.raises(UserError):
        conffile.set_keys("", settings)


def test_ensure_replaces_atomically_keeping_mode_and_dry_run_writes_nothing(tmp_path):
    path = tmp_path / "iscsid.conf"
    path.write_text(ISCSID)
    path.chmod(0o600)
    dry = Runner(dry_run=True)
    planned = conffile.ensure(dry, path, FABRIC)
    assert planned["changed"] and path.read_text() == ISCSID
    assert dry.planned == [("write", str(path), "mode=0600", *planned["changes"])]  # the one write, recorded
    real = Runner()
    done = conffile.ensure(real, path, FABRIC)
    assert done["changed"] and path.read_text() == done["after"] and real.executed == dry.planned
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["iscsid.conf"]  # no temporary file left
    again = Runner()
    assert not conffile.ensure(again, path, FABRIC)["changed"] and again.executed == []
    with pytest.raises(UserError) as exc:
        conffile.ensure(Runner(), tmp_path / "absent.conf", FABRIC)
    assert "install the package" in exc.value.fix


def test_the_plan_is_pure_and_its_one_step_is_the_write(tmp_path):
    path = tmp_path / "iscsid.conf"
    path.write_text(ISCSID)
    live = conffile.read(path)
    first, second = conffile.plan(live, FABRIC), conffile.plan(live, FABRIC)
    assert path.read_text() == ISCSID  # planning wrote nothing
    assert (first.after, first.changes) == (second.after, second.changes) and first.changed
    assert [s.to_dict() for s in first.steps] == [{"description": f"set {', '.join(first.changes)} in {path}",
                                                  "call": ["write", str(path), "mode=0644", *first.changes]}]
    assert not conffile.plan(conffile.read(path), {}).steps  # nothing to set: no step
