"""The layers of docs/architecture.md, checked: the front ends (fabricctl: main -> commands -> context, datasets,
checkpoints, zvols, output; fabric_node, the GPU-node agent's CLI; the Ansible modules) over fabric_core, whose
folders are its layers and sides: ``base`` (foundations of both sides) under ``node`` (what acts on a GPU node) and
``storage`` (what acts on a storage node), under ``services`` (what composes them). Checked: no import circle
anywhere (function-level imports included), no module reaching a private name of another, no command reading LIO
itself or importing main, a core that imports neither Ansible nor a front end, the layers' directions (base
imports no other layer, node only base, storage never services), and a GPU-node side (node, fabric_node) that
imports and runs without the storage node's code."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "plugins" / "module_utils" / "fabric_core"
PACKAGES = {"fabricctl": REPO / "fabricctl", "fabric_node": REPO / "fabric_node", "fabric_core": CORE}


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


@functools.cache
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
def test_the_core_imports_neither_ansible_nor_a_front_end(name):
    for target, _ in imports(name):
        assert not target.startswith(("ansible", "fabricctl", "fabric_node", "fabric_csi")), target


# --- the core's folders: its layers and sides ---------------------------------------------------------------

LAYERS = ("base", "node", "storage", "services")
# what each layer may import of the core (besides itself); the front ends (fabricctl, fabric_node, the modules
# and plugins) may import any layer, fabric_node only the GPU-node side
# (the two sides, node and storage, meet only in services and the front ends)
MAY_IMPORT = {"base": set(), "node": {"base"}, "storage": {"base"}, "services": {"base", "node", "storage"}}
GPU_NODE_SIDE = {"base", "node"}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "fabric_core" and len(parts) > 2 else None


def test_every_core_module_sits_in_a_layer():
    loose = sorted(m for m in MODULES if m.startswith("fabric_core.") and layer_of(m) not in LAYERS)
    assert loose == [m for m in loose if m.count(".") == 1 and m.split(".")[1] in LAYERS], loose  # the layers' __init__
    assert sorted(p.name for p in CORE.iterdir() if p.suffix == ".py") == ["__init__.py"]  # nothing flat


@pytest.mark.parametrize("name", sorted(m for m in MODULES if layer_of(m)))
def test_each_layer_imports_only_the_layers_below_it(name):
    layer = layer_of(name)
    reached = {layer_of(d) or d for d in graph()[name] if d.startswith("fabric_core.")} - {layer, "fabric_core"}
    assert reached <= MAY_IMPORT[layer], f"{name} ({layer}) imports {sorted(reached - MAY_IMPORT[layer])}"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("fabric_node")))
def test_the_node_agent_imports_only_the_gpu_node_side(name):
    reached = {layer_of(d) for d in graph()[name] if d.startswith("fabric_core.") and layer_of(d)}
    assert reached <= GPU_NODE_SIDE, f"{name} imports fabric_core.{sorted(reached - GPU_NODE_SIDE)}"


def test_the_gpu_node_side_imports_without_the_storage_side():
    """Every module of fabric_core.base and .node, and the agent's CLI, imported by a Python in which the storage
    and services layers cannot be imported (what a GPU node's agent and a CSI node plugin need)."""
    import subprocess
    import sys

    side = sorted(m for m in MODULES if layer_of(m) in GPU_NODE_SIDE or m.split(".")[0] == "fabric_node")
    script = f"""
import importlib, importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("fabric_core.storage", "fabric_core.services", "fabricctl")):
            raise ImportError(name + " is of the storage side")
sys.meta_path.insert(0, Refuse())
for name in {side!r}:
    importlib.import_module(name)
print(len({side!r}))
"""
    path = f"import sys; sys.path[:0] = {[str(CORE.parent), str(REPO)]!r}"  # fabric_core and fabric_node, nothing else
    proc = subprocess.run([sys.executable, "-I", "-c", path + script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.strip()) == len(side) > 20



# --- one plan contract (issue 28, item 1): a pure plan of model.Steps, effects and dry runs only through the runner

# the functions of the core that still take a dry_run argument instead: none since issue 28 item 1 (plan_session,
# the argv builders' -n checks, named check_only, and LIO's reconcile/converge, which take the runner); it stays empty
DRY_RUN_ARGUMENTS: set[str] = set()
ON_THE_CONTRACT = ("fabric_core.base.conffile", "fabric_core.base.files", "fabric_core.storage.tunables")


def dry_run_functions() -> set[str]:
    out = set()
    for name, path in MODULES.items():
        if not name.startswith("fabric_core."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":
                args = node.args.args + node.args.kwonlyargs + node.args.posonlyargs
                if any(a.arg == "dry_run" for a in args):
                    out.add(f"{name}.{node.name}")
    return out


def test_no_new_dry_run_argument_in_the_core():
    found = dry_run_functions()
    new = found - DRY_RUN_ARGUMENTS
    assert not new, f"a dry run goes through the runner, not an argument: {new}"
    assert not DRY_RUN_ARGUMENTS
    assert not [f for f in found if f.startswith(ON_THE_CONTRACT)]


@pytest.mark.parametrize("name", ON_THE_CONTRACT)
def test_a_mechanism_on_the_contract_plans_steps_and_writes_only_through_them(name):
    tree = ast.parse(MODULES[name].read_text())
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"read", "plan", "ensure"} <= functions.keys()
    plan = functions["plan"]
    called = {c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
              for c in ast.walk(plan) if isinstance(c, ast.Call)}
    assert not called & {"write_file", "write_live", "replacing", "open", "apply_steps"}  # plan writes nothing
    assert "Step" in called and "apply_steps" in {
        c.func.id for c in ast.walk(functions["ensure"]) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}


# --- one plan type (issue 28, "one plan type"): every plan of the core is a list of model.Step

PLAN_TYPE = "fabric_core.base.model.Step"
LIO = "fabric_core.storage.lio"


def plan_like_classes() -> list[str]:
    """Every class of the core whose name says it is a plan's step or action (``*Step``, ``*Action``)."""
    return sorted(f"{name}.{node.name}" for name, path in MODULES.items() if name.startswith("fabric_core.")
                  for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.ClassDef) and node.name.endswith(("Step", "Action")))


def test_the_core_has_one_plan_type():
    assert plan_like_classes() == [PLAN_TYPE]


def test_lio_plans_model_steps_made_in_one_place():
    """LIO's steps are model.Steps, all made by ``lio.operations.step`` (its description and CHAP redaction in one
    place): no other LIO module, and no user of LIO, builds a Step itself."""
    from fabric_core.base.model import Step
    from fabric_core.storage import lio

    made = lio.step("set_auth", "iqn.2026-11.x.y:t", {"initiator": "iqn.2026-11.x.y:i", "field": "password",
                                                      "value": "s3cret-value"}, "CHAP")
    assert type(made) is Step and made.kind == "set_auth" and made.target and made.reason == "CHAP"
    assert "s3cret-value" not in made.description + repr(made) + str(lio.step_dict(made))
    builders = []
    for name, path in MODULES.items():
        if not name.startswith("fabric_core."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            calls = {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            if "Step" in calls and (name.startswith(LIO) or name == "fabric_core.services.grants"):
                builders.append(f"{name}.{node.name}")
    assert builders == [f"{LIO}.operations.step"]


# --- issue 28's measure: no file of the core above 700 lines (a file that grows past it is split by concern)
CORE_FILE_LINES = 700


def test_no_core_file_is_above_700_lines():
    long = {str(p.relative_to(CORE)): n for p in sorted(CORE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > CORE_FILE_LINES}
    assert not long, f"split these by concern (issue 28: at most {CORE_FILE_LINES} lines a file): {long}"
