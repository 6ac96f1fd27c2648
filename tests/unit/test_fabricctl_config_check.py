"""fabricctl config check: the configuration loaded and validated as every command loads it (retention
policies too), summarized without a secret, exit 0; a bad file is exit 1 with the problem and its fix
(--json: {"valid": false, ...}); nothing but the file is read, and no lock is taken."""

from __future__ import annotations

import json

import pytest
import yaml
from test_fabricctl_config import EXAMPLE, MINIMAL

from fabricctl.main import main

SECRETS = ("s3cret-s3cret", "other-s3cret", "gpu2-s3cret-1", "gpu2-mutual-1")


@pytest.fixture
def example(tmp_path) -> str:
    path = tmp_path / "config.yml"
    path.write_text(EXAMPLE)
    return str(path)


def write(tmp_path, raw) -> str:
    path = tmp_path / "other.yml"
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw))
    return str(path)


def test_a_valid_configuration_is_summarized_without_a_secret(example, capsys):
    assert main(["--config", example, "config", "check"]) == 0
    out, err = capsys.readouterr()
    assert f"configuration: {example}: valid" in out
    assert "tank (datasets tank/datasets, checkpoints tank/checkpoints)" in out
    assert "iqn.2026-11.io.fabric.lab.fabricctl" in out and "10.77.0.11:3260" in out
    assert "gpu_nodes: gpu1, gpu2" in out and "1 policies, 1 assignments; metrics: loss, accuracy" in out
    assert "gpu1  10.77.0.21  iqn.2026-11.io.fabric.lab:gpu1  mutual" in out
    assert "capacity 80/90 %" in out and "warnings: none" in out
    assert not any(secret in out + err for secret in SECRETS)


def test_json_summary(example, capsys):
    assert main(["--config", example, "config", "check", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is True and doc["source"] == example and doc["pool"] == "tank"
    assert doc["iqn_base"] == "iqn.2026-11.io.fabric.lab.fabricctl" and doc["portal"] == "10.77.0.11:3260"
    assert doc["hosts"]["gpu2"] == {"address": "10.77.0.22", "initiator": "iqn.2026-11.io.fabric.lab:gpu2",
                                    "chap": "mutual"}
    assert doc["groups"] == {"gpu_nodes": ["gpu1", "gpu2"]} and doc["storage_nodes"] == {}
    assert doc["retention"] == {"policies": ["checkpoints-default"], "assign": {"checkpoints/*": "checkpoints-default"}}
    assert doc["health"]["scrub_critical_days"] == 60 and doc["lock_wait_seconds"] == 60 and doc["warnings"] == []
    assert not any(secret in json.dumps(doc) for secret in SECRETS)


def test_warnings_obsolete_keys_no_hosts_and_no_chap(tmp_path, capsys):
    raw = {**MINIMAL, "insecure_no_chap": True, "rotation": {"lock_file": "/run/fabricctl/rotate.lock"},
           "node": "storage1", "storage_nodes": {"storage2": {"address": "10.77.0.12"}}}
    path = write(tmp_path, raw)
    assert main(["--config", path, "config", "check"]) == 0
    out = capsys.readouterr().out
    assert "warnings: 3" in out and "rotation.lock_file is obsolete" in out
    assert "insecure_no_chap is set" in out and "no GPU node is configured" in out
    assert "node:" in out and "storage1" in out and "storage2 (10.77.0.12)" in out
    assert main(["--config", path, "config", "check", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["warnings"]) == 3 and doc["node"] == "storage1"
    assert doc["storage_nodes"] == {"storage2": {"address": "10.77.0.12"}}


def test_an_invalid_configuration_is_exit_1_naming_the_key_and_the_fix(tmp_path, capsys):
    path = write(tmp_path, EXAMPLE.replace("lock: {wait_seconds: 60}", "lock: {wait_second: 60}"))
    assert main(["--config", path, "config", "check"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "unknown key 'wait_second' at lock.wait_second" in err and "fix:" in err
    assert main(["--config", path, "config", "check", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False and doc["source"] == path and "wait_second" in doc["error"] and doc["fix"]
    assert (doc["exit_status"], doc["error_type"]) == (1, "UserError")  # as every command's failure under --json


def test_retention_policies_are_validated_too(tmp_path, capsys):
    raw = yaml.safe_load(EXAMPLE)
    raw["retention"]["policies"]["checkpoints-default"]["keep_best"]["metric"] = "perplexity"  # not in metrics
    assert main(["--config", write(tmp_path, raw), "config", "check"]) == 1
    assert "perplexity" in capsys.readouterr().err


def test_a_missing_file_and_the_environment(tmp_path, monkeypatch, capsys, example):
    assert main(["--config", str(tmp_path / "nope.yml"), "config", "check"]) == 1
    assert "does not exist" in capsys.readouterr().err
    monkeypatch.setenv("FABRICCTL_CONFIG", example)
    assert main(["config", "check", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == example


def test_config_check_reads_only_and_takes_no_lock():
    from fabricctl.commands import config_check

    assert config_check.MUTATING is False
