"""plugins/modules/fabric_files.py in-process on a temporary directory: a role's small files and directories in
one module execution (fabric_core.base.files: one read, a pure plan of model.Steps, one apply through the runner).
The module runs no command: run_module's empty script fails any."""

from __future__ import annotations

import grp
import os
import pwd
import stat

import pytest
from fabric_core.base import files
from fabric_core.base.errors import UserError
from support import REPO, run_module

MODULE_SOURCE = (REPO / "plugins" / "modules" / "fabric_files.py").read_text()

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def declaration(root) -> list[dict]:
    return [
        {"path": f"{root}/etc", "state": "directory", "mode": "0700", "owner": ME, "group": MY_GROUP},
        {"path": f"{root}/etc/config.yml", "content": "a: 1\n", "mode": "0600"},
        {"path": f"{root}/bin-fabricctl", "content": "#!/bin/sh\nexec true\n", "mode": "0755"},
        {"path": f"{root}/old-cron", "state": "absent"},
    ]


def test_one_execution_creates_writes_and_removes_then_a_second_changes_nothing(tmp_path):
    (tmp_path / "old-cron").write_text("* * * * * root true\n")
    out = run_module("fabric_files", {"files": declaration(tmp_path)}, diff=True)
    assert out["changed"] is True and "failed" not in out and out["_commands"] == []
    assert out["changed_paths"] == [f"{tmp_path}/etc", f"{tmp_path}/etc/config.yml", f"{tmp_path}/bin-fabricctl",
                                    f"{tmp_path}/old-cron"]
    assert out["changes"][f"{tmp_path}/etc"] == ["created (mode 0700)"]
    assert out["changes"][f"{tmp_path}/old-cron"] == ["removed"]
    assert mode(tmp_path / "etc") == 0o700 and mode(tmp_path / "etc" / "config.yml") == 0o600
    assert (tmp_path / "bin-fabricctl").read_text() == "#!/bin/sh\nexec true\n"
    assert mode(tmp_path / "bin-fabricctl") == 0o755
    assert not (tmp_path / "old-cron").exists()
    assert [d["after_header"] for d in out["diff"]] == [f"{tmp_path}/etc/config.yml", f"{tmp_path}/bin-fabricctl"]
    assert out["diff"][0]["before"] == "" and out["diff"][0]["after"] == "a: 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin-fabricctl", "etc"]  # no temporary file left
    again = run_module("fabric_files", {"files": declaration(tmp_path)}, diff=True)
    assert again["changed"] is False and again["changed_paths"] == [] and again["commands"] == []
    assert "diff" not in again


def test_check_mode_reports_every_change_and_makes_none(tmp_path):
    (tmp_path / "bin-fabricctl").write_text("old\n")
    os.chmod(tmp_path / "bin-fabricctl", 0o644)
    out = run_module("fabric_files", {"files": declaration(tmp_path)}, check_mode=True, diff=True)
    assert out["changed"] is True
    assert out["changed_paths"] == [f"{tmp_path}/etc", f"{tmp_path}/etc/config.yml", f"{tmp_path}/bin-fabricctl"]
    assert out["changes"][f"{tmp_path}/bin-fabricctl"] == ["written (mode 0755)"]
    assert [c[0] for c in out["commands"]] == ["mkdir", "write", "write"]
    assert out["diff"][1]["before"] == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin-fabricctl"]
    assert (tmp_path / "bin-fabricctl").read_text() == "old\n" and mode(tmp_path / "bin-fabricctl") == 0o644


def test_only_the_mode_of_an_unchanged_file_is_set(tmp_path):
    run_module("fabric_files", {"files": declaration(tmp_path)})
    os.chmod(tmp_path / "etc" / "config.yml", 0o644)
    out = run_module("fabric_files", {"files": declaration(tmp_path)}, diff=True)
    assert out["changes"] == {f"{tmp_path}/etc/config.yml": ["mode 0644 -> 0600"]}
    assert [c[0] for c in out["commands"]] == ["chmod"] and "diff" not in out  # no content diff: same content
    assert mode(tmp_path / "etc" / "config.yml") == 0o600


def test_an_existing_path_keeps_its_own_mode_when_none_is_declared(tmp_path):
    (tmp_path / "textfile").mkdir(mode=0o750)
    os.chmod(tmp_path / "textfile", 0o750)
    out = run_module("fabric_files", {"files": [{"path": f"{tmp_path}/textfile", "state": "directory"}]})
    assert out["changed"] is False and mode(tmp_path / "textfile") == 0o750


def test_a_link_planted_at_a_files_name_is_replaced_never_written_through(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep me\n")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "config.yml").symlink_to(target)
    out = run_module("fabric_files", {"files": declaration(tmp_path)})
    assert out["changes"][f"{tmp_path}/etc/config.yml"] == ["written over a link (mode 0600)"]
    assert target.read_text() == "keep me\n"
    assert not (tmp_path / "etc" / "config.yml").is_symlink()
    assert (tmp_path / "etc" / "config.yml").read_text() == "a: 1\n"


@pytest.mark.parametrize(("make", "declared", "words"), [
    (lambda p: p.mkdir(), {"content": "x\n"}, "is a directory, where a file is declared"),
    (lambda p: p.write_text("x"), {"state": "directory"}, "is a file, where a directory is declared"),
])
def test_something_else_in_the_way_is_refused_before_any_change(tmp_path, make, declared, words):
    make(tmp_path / "thing")
    first = {"path": f"{tmp_path}/first", "content": "written?\n"}
    out = run_module("fabric_files", {"files": [first, {"path": f"{tmp_path}/thing", **declared}]})
    assert out["failed"] is True and words in out["msg"] and "by hand" in out["msg"]
    assert not (tmp_path / "first").exists()  # the plan is refused whole: nothing before it was made


def test_a_directory_with_files_in_it_is_never_removed(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    (tmp_path / "empty").mkdir()
    out = run_module("fabric_files", {"files": [{"path": f"{tmp_path}/d", "state": "absent"}]})
    assert out["failed"] is True and "with files in it" in out["msg"] and (tmp_path / "d" / "f").exists()
    out = run_module("fabric_files", {"files": [{"path": f"{tmp_path}/empty", "state": "absent"}]})
    assert out["changes"] == {f"{tmp_path}/empty": ["removed"]} and not (tmp_path / "empty").exists()


def test_a_secret_file_shows_no_content_anywhere(tmp_path):
    secret = "chap-secret-0123456789abcdef"
    out = run_module("fabric_files", {"files": [
        {"path": f"{tmp_path}/credentials.json", "secret_content": f'{{"password": "{secret}"}}\n', "mode": "0600"}]},
        diff=True)
    assert out["changed"] is True and "diff" not in out
    assert secret not in repr(out)
    # the option itself is no_log: AnsibleModule logs its arguments to the node's journal, masking those
    assert "secret_content=dict(type=\"str\", no_log=True)" in MODULE_SOURCE
    both = run_module("fabric_files", {"files": [{"path": f"{tmp_path}/x", "content": "a", "secret_content": "b"}]})
    assert both["failed"] is True and "both given" in both["msg"]
    assert secret in (tmp_path / "credentials.json").read_text()


@pytest.mark.parametrize(("item", "words"), [
    ({"path": "relative/x", "content": "x"}, "not an absolute, normalized path"),
    ({"path": "/etc/../x", "content": "x"}, "not an absolute, normalized path"),
    ({"path": "/x/", "content": "x"}, "not an absolute, normalized path"),
    ({"path": "/x"}, "a file needs its content"),
    ({"path": "/x", "state": "directory", "content": "x"}, "only a file has content"),
    ({"path": "/x", "content": "x", "mode": "0999"}, "is not an octal number"),
    ({"path": "/x", "content": "x", "mode": "17777"}, "out of range"),
    ({"path": "/x", "content": "x", "owner": "no-such-user-fabric"}, "user 'no-such-user-fabric' does not exist"),
])
def test_bad_declarations_are_refused_with_the_fix(item, words):
    out = run_module("fabric_files", {"files": [item]})
    assert out["failed"] is True and words in out["msg"]


def test_a_path_declared_twice_is_refused():
    with pytest.raises(UserError, match="declared twice"):
        files.declared([{"path": "/x", "content": "a"}, {"path": "/x", "state": "absent"}])


def test_the_plan_is_pure_and_orders_a_directory_before_the_files_in_it():
    wanted = files.declared([{"path": "/d", "state": "directory", "mode": "0700"},
                             {"path": "/d/f", "content": "x\n", "mode": "0600"}])
    live = {"/d": files.Live("/d", None), "/d/f": files.Live("/d/f", None)}
    planned = files.plan(wanted, live, files.ids(wanted))
    assert [s.entry[0] for s in planned.steps] == ["mkdir", "write"]
    assert planned.steps[1].entry == ("write", "/d/f", "mode=0600", "owner=0:0")
    same = files.plan(wanted, {"/d": files.Live("/d", "directory", 0o700), "/d/f": files.Live("/d/f", "file", 0o600,
                                                                                                content=b"x\n")}, {})
    assert same.steps == [] and not same.changed


def test_a_link_is_made_moved_atomically_and_left_when_right(tmp_path):
    link = {"path": f"{tmp_path}/fabric-node", "state": "link", "src": "/opt/fabric-node/bin/fabric-node"}
    out = run_module("fabric_files", {"files": [link]})
    assert out["changes"] == {f"{tmp_path}/fabric-node": ["linked to /opt/fabric-node/bin/fabric-node"]}
    assert os.readlink(tmp_path / "fabric-node") == "/opt/fabric-node/bin/fabric-node"
    assert run_module("fabric_files", {"files": [link]})["changed"] is False
    moved = run_module("fabric_files", {"files": [dict(link, src="/opt/new/bin/fabric-node")]})
    assert moved["changes"][f"{tmp_path}/fabric-node"] == [
        "linked to /opt/new/bin/fabric-node (was /opt/fabric-node/bin/fabric-node)"]
    assert os.readlink(tmp_path / "fabric-node") == "/opt/new/bin/fabric-node"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fabric-node"]  # no temporary link left
    (tmp_path / "file").write_text("x")
    refused = run_module("fabric_files", {"files": [dict(link, path=f"{tmp_path}/file")]})
    assert refused["failed"] is True and "is a file, where a link is declared" in refused["msg"]
    bad = run_module("fabric_files", {"files": [{"path": f"{tmp_path}/x", "state": "link"}]})
    assert bad["failed"] is True and "only a link, has a src" in bad["msg"]


def test_a_directory_gets_its_missing_parents_and_a_refused_write_is_named(tmp_path):
    out = run_module("fabric_files", {"files": [{"path": f"{tmp_path}/srv/fabricctl/staging", "state": "directory"}]})
    assert out["changed"] is True and (tmp_path / "srv" / "fabricctl" / "staging").is_dir()
    missing = run_module("fabric_files", {"files": [{"path": f"{tmp_path}/nowhere/f", "content": "x\n"}]})
    assert missing["failed"] is True and "No such file or directory" in missing["msg"]
    assert "nothing after it was changed" in missing["msg"]
