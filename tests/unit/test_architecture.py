"""The layers of docs/architecture.md, checked: fabricctl (main -> commands -> context, datasets,
checkpoints, zvols, output) over fabric_core (the publishing service over lio, iscsi, mounts, lzc, zfs, over
the rulebook), with no import circle anywhere (function-level imports included), no module reaching a
private name of another, no command reading LIO itself or importing main, and a core that imports
neither Ansible nor fabricctl."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {"fabricctl": REPO / "fabricctl", "fabric_core": REPO / "plugins" / "module_utils" / "fabric_core"}


def project_modules() -> dict[str, Path]:
    out = {}
    for package, base in PACKAGES.items():
        for path in base.rglob("*.py"):
            parts = [package, *path.relative_to(base).with_suffix("").parts]
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = project_modules()
COLLECTION = "ansible_collections.gpufabric.storage.plugins.module_utils."  # how the modules import fabric_core


def imports(name: str) -> list[tuple[str, list[str]]]:
    """(imported module, names imported from it) for every import statement of a module, however deep."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name.removeprefix(COLLECTION), []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = (node.module or "").removeprefix(COLLECTION)
            out.append((target, [a.name for a in node.names]))
    return out


def graph() -> dict[str, set[str]]:
    edges = {}
    for name in MODULES:
        deps = set()
        for target, names in imports(name):
            submodules = {f"{target}.{n}" for n in names} & MODULES.keys()
            # `from PACKAGE import SUBMODULE, ...` depends on the submodules (a package's own modules import each
            # other so, while its __init__ runs); any other name imported from a package depends on its __init__
            wanted = submodules if names and len(submodules) == len(names) else {target, *submodules}
            deps |= {m for m in wanted if m in MODULES and m != name}
        edges[name] = deps
    return edges


def test_no_import_circle_anywhere():
    edges = graph()
    cycles = []

    def visit(node, path, seen):
        for nxt in edges[node]:
            if nxt in path:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in seen:
                seen.add(nxt)
                visit(nxt, [*path, nxt], seen)

    for start in edges:
        visit(start, [start], {start})
    assert cycles == []


def _module_aliases(tree) -> dict[str, str]:
    """Local names bound to project modules by `import` / `from ... import module`."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name
    return aliases


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_reaches_a_private_name_of_another(name):
    tree = ast.parse(MODULES[name].read_text())
    module_names = {m.rsplit(".", 1)[-1] for m in MODULES}
    aliases = {k for k, v in _module_aliases(tree).items() if v.rsplit(".", 1)[-1] in module_names}
    reached = [f"{node.value.id}.{node.attr}" for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
               and node.value.id in aliases and node.attr.startswith("_") and not node.attr.startswith("__")]
    reached += [f"{target}.{n}" for target, names in imports(name) if target in MODULES
                for n in names if n.startswith("_") and not n.startswith("__")]
    assert reached == []
    assert "SLF001" not in MODULES[name].read_text()


COMMANDS = sorted(m for m in MODULES if m.startswith("fabricctl.commands."))


@pytest.mark.parametrize("name", COMMANDS)
def test_commands_ask_the_publishing_service_and_never_import_main(name):
    targets = {t for t, _ in imports(name)} | {f"{t}.{n}" for t, names in imports(name) for n in names}
    assert "fabricctl.main" not in targets
    assert not targets & {"fabric_core.storage.lio", "fabric_core.node.iscsi"}  # LIO and sessions: through the service


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("fabric_core")))
def test_the_core_imports_neither_ansible_nor_fabricctl(name):
    for target, _ in imports(name):
        assert not target.startswith(("ansible", "fabricctl")), target
