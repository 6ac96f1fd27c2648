"""The Python scripts that integration tests send to a lab node (string constants that import fabric_core) call the
core as it is now: each call of a fabric_core function or class named in such a script binds to its signature
(argument count and keyword names). The lab runs them an hour into CI; a renamed keyword (``dry_run=`` became
``runner=``) must fail here, in seconds, not there."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins" / "module_utils"))


def scripts() -> list[tuple[str, int, str]]:
    """(file, line, source) of every string constant of tests/integration that is a fabric_core script."""
    out = []
    for path in sorted((REPO / "tests" / "integration").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "from fabric_core" in node.value:
                out.append((path.name, node.lineno, node.value))
    return out


def bound_names(tree: ast.AST) -> dict[str, object]:
    """Local name -> the fabric_core module or object it was imported as."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fabric_core"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                try:
                    names[alias.asname or alias.name] = importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    names[alias.asname or alias.name] = getattr(module, alias.name)
    return names


def target(func: ast.expr, names: dict):
    if isinstance(func, ast.Name):
        return names.get(func.id)
    if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            and inspect.ismodule(names.get(func.value.id))):
        return getattr(names[func.value.id], func.attr, AttributeError(f"{func.value.id}.{func.attr}"))
    return None


SCRIPTS = scripts()


def test_some_scripts_are_found():
    assert len(SCRIPTS) >= 4, SCRIPTS  # the finder itself works: the lab tests carry four such scripts today


@pytest.mark.parametrize("where, source", [(f"{f}:{line}", src) for f, line, src in SCRIPTS],
                         ids=[f"{f}:{line}" for f, line, _ in SCRIPTS])
def test_a_lab_script_calls_the_core_as_it_is(where, source):
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a fragment formatted later (an f-string's template): its calls are not checked here
        pytest.skip(f"{where}: a template, not a whole script")
    names = bound_names(tree)
    checked = 0
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        obj = target(call.func, names)
        if obj is None or inspect.ismodule(obj):
            continue
        assert not isinstance(obj, AttributeError), f"{where}: fabric_core has no {obj}"
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            continue
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            continue
        try:
            sig.bind(*range(len(call.args)), **{k.arg: None for k in call.keywords})
        except TypeError as err:
            pytest.fail(f"{where} line {call.lineno}: {ast.unparse(call)[:120]} does not fit "
                        f"{getattr(obj, '__qualname__', obj)}{sig}: {err}")
        checked += 1
    assert checked or not names, f"{where}: imports fabric_core but no call of it was checked"
