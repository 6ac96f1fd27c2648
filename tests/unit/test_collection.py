"""The repository root is the Ansible collection gpufabric.storage: galaxy.yml carries the project's one version,
the checkout finds itself through the committed symlink (ansible.cfg's collections_path), and the modules, action
and test plugins are reached by their fully qualified names only."""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
FQCN = "gpufabric.storage"


def test_galaxy_version_is_the_project_version():
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    init = (REPO / "plugins" / "module_utils" / "fabric_core" / "__init__.py").read_text()
    assert f"{galaxy['namespace']}.{galaxy['name']}" == FQCN
    assert galaxy["version"] == re.search(r'__version__ = "([^"]+)"', init).group(1)


def test_the_checkout_is_on_its_own_collections_path():
    link = REPO / "collections" / "ansible_collections" / "gpufabric" / "storage"
    assert link.is_symlink() and os.readlink(link) == "../../.."
    assert link.resolve() == REPO
    assert "collections_path = ./collections:" in (REPO / "ansible.cfg").read_text()


def test_roles_and_playbooks_call_the_projects_plugins_by_fqcn():
    names = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("fabric_*.py"))
    short = re.compile(r"^\s*(?:- )?(" + "|".join(names) + r"):", re.M)
    jinja_short = re.compile(r"\bis (?:not )?fabric_|(?:select|reject)\('fabric_")
    for path in [*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("playbooks/*.yml"), *REPO.glob("molecule/*/*.yml")]:
        text = path.read_text()
        assert not short.search(text), path
        assert not jinja_short.search(text), path
