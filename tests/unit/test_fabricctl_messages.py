"""Messages that help (issue 32, item 6): a "did you mean" never suggests what was typed (the one suggester,
fabric_core.base.rules.closest, used by every such message), a group or a list where one host is wanted is refused
saying so, and `verify --on` takes a group or a list like --to does, checking every host of it."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from fabric_core.base import rules
from fabric_core.base.errors import NotFound, UserError
from support import fabricctl_config

from fabricctl import config as config_file
from fabricctl.commands import verify
from fabricctl.main import main

CHOICES = ["gpu1", "gpu2", "gpu_nodes", "rack2", "keep_last", "daily", "1"]


@pytest.fixture
def cfg_path(tmp_path) -> str:
    path = tmp_path / "config.yml"
    path.write_text(fabricctl_config() + "  rack2: [gpu2]\n  empty: []\nlock: {wait_seconds: 0}\n")
    return str(path)


@pytest.fixture
def cfg(cfg_path):
    return config_file.load(cfg_path)


# --------------------------------------------------------------------------------------------
# the suggester


@pytest.mark.parametrize("word", CHOICES + [1])
def test_a_suggestion_is_never_the_word_typed(word):
    assert rules.closest(word, CHOICES) != str(word)
    assert f"did you mean {str(word)!r}?" != rules.suggestion(word, CHOICES)


def test_a_near_miss_is_still_suggested():
    assert rules.suggestion("gpu_node", CHOICES) == "did you mean 'gpu_nodes'?"
    assert rules.suggestion("dayly", CHOICES) == "did you mean 'daily'?"
    assert rules.suggestion("gpu3", ["gpu3", "gpu1"]) == "did you mean 'gpu1'?"  # the next closest, not itself
    assert rules.suggestion("gpu3", ["gpu3"]) == ""


def test_a_yaml_key_that_reads_like_a_valid_one_is_not_suggested_back():
    with pytest.raises(UserError) as err:
        rules.check_keys({1: "x"}, ("1", "keep_last"), "retention")
    assert "did you mean" not in str(err.value)


def test_no_message_of_the_configuration_suggests_the_name_it_refuses(cfg):
    """Every name the configuration knows, asked for where it does not fit: its message suggests another name or
    none."""
    names = [*cfg.hosts, *cfg.groups, "gpu_nodes", "gpu1,gpu2"]
    for name in names:
        for call in (lambda n: cfg.host(n, "--on"), cfg.storage_node):
            try:
                call(name)
            except UserError as exc:
                for suggested in re.findall(r"did you mean '([^']*)'\?", str(exc)):
                    assert suggested != name, (name, str(exc))


# --------------------------------------------------------------------------------------------
# one host wanted


def test_a_group_where_one_host_is_wanted(cfg):
    with pytest.raises(UserError) as err:
        cfg.host("gpu_nodes", "--writer")
    assert err.value.problem == "'gpu_nodes' is a group (gpu1, gpu2), and --writer takes one host"
    assert err.value.fix == "name one host: one of gpu1, gpu2" and "did you mean" not in str(err.value)
    with pytest.raises(UserError, match=r"'empty' is a group \(no hosts\), and one host is wanted here"):
        cfg.host("empty")


def test_a_list_where_one_host_is_wanted(cfg):
    with pytest.raises(UserError) as err:
        cfg.host("gpu1,gpu2", "--writer")
    assert err.value.problem == "'gpu1,gpu2' is a list of 2 names, and --writer takes one host"
    assert err.value.fix == "name one host, e.g. 'gpu1'"


def test_an_unknown_host_still_lists_the_known_ones(cfg):
    with pytest.raises(NotFound) as err:
        cfg.host("gpu_nodez", "--on")
    assert "unknown host or group 'gpu_nodez'" in err.value.problem and "did you mean 'gpu_nodes'?" in err.value.fix


def test_checkpoint_volume_create_refuses_a_group_as_its_writer(cfg_path, capsys):
    assert main(["--config", cfg_path, "checkpoint", "volume", "create", "llama", "--size", "1G", "--writer",
                 "gpu_nodes", "--json"], sink=lambda f: None) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"] == "'gpu_nodes' is a group (gpu1, gpu2), and --writer takes one host"


# --------------------------------------------------------------------------------------------
# verify --on a group or a list


def fake_verify(monkeypatch, outcomes: dict) -> list:
    """verify with the version found and each host's check answered from ``outcomes`` (host -> report dict, or an
    exception to raise); returns the hosts checked."""
    checked: list = []
    export = SimpleNamespace(name="imagenet", version="v1", mountpoint="/datasets/imagenet/v1")
    monkeypatch.setattr(verify.datasets, "require_version", lambda ctx, name, version: {
        "fabric:manifest-sha256": "abc"})
    monkeypatch.setattr(verify.datasets, "export_of", lambda ctx, row: export)

    def remote(ctx, export, host, workers, expected):
        checked.append(host.name)
        answer = outcomes[host.name]
        if isinstance(answer, BaseException):
            raise answer
        return {**answer, "manifest_sha256": {"expected": expected, "actual": "abc", "ok": True}}

    monkeypatch.setattr(verify, "verify_remote", remote)
    monkeypatch.setattr(verify, "verify_local", lambda *a: pytest.fail("checked on the storage node"))
    return checked


GOOD = {"ok": True, "files": 3}
BAD = {"ok": False, "files": 3, "missing": ["a.bin"]}


@pytest.mark.parametrize("on, hosts", [("gpu_nodes", ["gpu1", "gpu2"]), ("gpu1,gpu2", ["gpu1", "gpu2"]),
                                       ("rack2", ["gpu2"]), ("gpu1,rack2", ["gpu1", "gpu2"])])
def test_verify_on_a_group_or_a_list_checks_each_host(on, hosts, cfg_path, monkeypatch, capsys):
    checked = fake_verify(monkeypatch, {"gpu1": GOOD, "gpu2": GOOD})
    assert main(["--config", cfg_path, "verify", "imagenet@v1", "--on", on]) == 0
    assert sorted(checked) == hosts
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"imagenet@v1 on {', '.join(hosts)}: OK"
    assert main(["--config", cfg_path, "verify", "imagenet@v1", "--on", on, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["where"] == hosts and list(doc["hosts"]) == hosts
    assert all(doc["hosts"][h]["result"]["ok"] for h in hosts)


def test_verify_on_one_host_keeps_its_report(cfg_path, monkeypatch, capsys):
    checked = fake_verify(monkeypatch, {"gpu1": GOOD})
    assert main(["--config", cfg_path, "verify", "imagenet@v1", "--on", "gpu1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert checked == ["gpu1"] and doc["where"] == "gpu1" and doc["ok"] is True and doc["files"] == 3


def test_verify_on_a_group_names_the_hosts_that_differ(cfg_path, monkeypatch, capsys):
    fake_verify(monkeypatch, {"gpu1": GOOD, "gpu2": BAD})
    assert main(["--config", cfg_path, "verify", "imagenet@v1", "--on", "gpu_nodes"]) == 1
    out, err = capsys.readouterr()
    assert "gpu2:\n          missing  a.bin" in out
    assert "imagenet@v1 differs from its manifest on gpu2" in err
    assert main(["--config", cfg_path, "verify", "imagenet@v1", "--on", "gpu_nodes", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["hosts"]["gpu2"]["result"]["missing"] == ["a.bin"]
    assert (doc["exit_status"], doc["error_type"]) == (1, "VerifyFailed")


def test_verify_on_a_group_with_a_host_not_reached_is_partial(cfg_path, monkeypatch, capsys):
    fake_verify(monkeypatch, {"gpu1": GOOD, "gpu2": UserError("gpu2: no route to host", "check its network")})
    assert main(["--config", cfg_path, "verify", "imagenet@v1", "--on", "gpu_nodes", "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["hosts"]["gpu2"]["status"] == "failed" and doc["error_type"] == "PartialFailure"
    fake_verify(monkeypatch, {"gpu1": BAD, "gpu2": UserError("gpu2: no route to host", "check its network")})
    assert main(["--config", cfg_path, "verify", "imagenet@v1", "--on", "gpu_nodes"]) == 1
    assert "differs from its manifest on gpu1; not checked on gpu2" in capsys.readouterr().err


def test_verify_on_an_unknown_name_reads_nothing(cfg_path, monkeypatch, capsys):
    checked = fake_verify(monkeypatch, {})
    monkeypatch.setattr(verify.datasets, "require_version", lambda *a: pytest.fail("read before the hosts"))
    assert main(["--config", cfg_path, "verify", "imagenet@v1", "--on", "gpu_nodez"]) == 1
    err = capsys.readouterr().err
    assert "unknown host or group 'gpu_nodez'" in err and "did you mean 'gpu_nodes'?" in err and checked == []
