"""The one table of LIO's operations (``OPERATIONS``): their order in a plan (``RANK``), their simulation on a
dump (a dry run's predicted after-state, ``simulate``) and their execution through rtslib (``kernel.apply``,
on ``kernel``'s rtslib objects); the plan's steps (``step``: a ``model.Step`` each, its ``kind`` the operation),
their JSON form (``step_dict``) and the readable views of a dump (``summarize``).
All of it pure: plain dicts in, plain dicts out.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from ...base.model import Step
from ...base.names import TPG_TAG
from .spec import DISCOVERY_CREDENTIALS, REDACTED, DesiredState, emulate_pr

# ---------------------------------------------------------------------------------------------
# Steps

KEEP = "keep"  # a step of this kind is a report (an object left alone), not a change


def secret_field(op: str, params: dict) -> bool:
    """Whether the step sets a CHAP secret (a password or a mutual password): its value is never shown."""
    return op == "set_auth" and "password" in params.get("field", "")


def step(op: str, target: str = "", params: dict | None = None, reason: str = "") -> Step:
    """One LIO operation of a plan, as a plan step (``model.Step``): ``kind`` is the operation (a name of
    ``OPERATIONS``; "keep": a report), ``target`` the target IQN it acts on ("" for backstores and discovery),
    ``params`` its arguments, ``reason`` why it is planned. A CHAP secret (``secret_field``) is carried in the
    step's ``data`` only: its params hold it redacted, so the description (one readable line: operation, target,
    arguments, reason), ``step_dict`` and what the runner records never show it."""
    params = dict(params or {})
    data = None
    if secret_field(op, params):
        data = params.get("value", "")
        params["value"] = REDACTED if data else ""
    where = f" {target}" if target else ""
    args = " ".join(f"{k}={v}" for k, v in params.items())
    text = f"{op}{where}" + (f" {args}" if args else "")
    return Step(text + (f" ({reason})" if reason else ""), kind=op, params=params, target=target, reason=reason,
                data=data)


def value_of(s: Step):
    """The value a set_* step sets: a CHAP secret from the step's ``data``, any other value from its params."""
    return s.data if s.data is not None else s.params["value"]


def step_dict(s: Step) -> dict:
    """A LIO step as JSON reports it: {op, target, params, reason} (a CHAP secret redacted)."""
    return {"op": s.kind, "target": s.target, "params": dict(s.params), "reason": s.reason}


def backstore_path(name: str) -> str:
    return f"/backstores/block/{name}"


def tpg_of(target: dict | None, tag: int = TPG_TAG) -> dict | None:
    for tpg in (target or {}).get("tpgs", []):
        if tpg.get("tag") == tag:
            return tpg
    return None


def strip_brackets(ip: str) -> str:
    return ip[1:-1] if ip.startswith("[") and ip.endswith("]") else ip


# ---------------------------------------------------------------------------------------------
# The operations: one table of what each step does, in the order a plan runs them (children
# removed before their parents, parents created before their children): its simulation on a dump
# (the predicted after-state of a dry run) and its execution through rtslib (returning the undo of
# a creation).


class DumpModel:
    """A dump being changed by a simulation (``simulate``)."""

    def __init__(self, dump: dict):
        self.dump = dump

    def target(self, iqn: str) -> dict:
        return next(t for t in self.dump["targets"] if t["wwn"] == iqn)

    def tpg(self, iqn: str) -> dict:
        return tpg_of(self.target(iqn))

    def acl(self, iqn: str, initiator: str) -> dict:
        return next(a for a in self.tpg(iqn)["node_acls"] if a["node_wwn"] == initiator)

    def mapped_lun(self, a: Step) -> dict:
        return next(m for m in self.acl(a.target, a.params["initiator"])["mapped_luns"]
                    if m["index"] == a.params["index"])

    def set_acl_field(self, a: Step, key: str) -> None:
        """One field of an ACL as rtslib's dump has it (a CHAP field, the tag): set, or gone when empty."""
        acl = self.acl(a.target, a.params["initiator"])
        if value_of(a):
            acl[key] = value_of(a)
        else:
            acl.pop(key, None)

    @staticmethod
    def drop(items: list, unwanted) -> None:
        items[:] = [x for x in items if not unwanted(x)]

    def close_discovery(self) -> None:
        modules = self.dump.setdefault("fabric_modules", [])
        self.drop(modules, lambda fm: fm.get("name") == "iscsi")
        modules.append({"name": "iscsi", "discovery_enable_auth": True})


@dataclass(frozen=True)
class Operation:
    """One kind of step (its ``kind``): its simulation on a dump and its execution through rtslib. A creation's
    execution returns the undo (the new object's delete), which ``apply`` calls when a later step fails."""

    name: str
    simulate: Callable[[DumpModel, Step], object]
    execute: Callable[[object, Step], object]  # on kernel's rtslib objects
    creates: bool = False


def _report(*_args) -> None:
    """``keep`` steps are reports: nothing to simulate or execute."""


OPERATIONS: dict[str, Operation] = {op.name: op for op in (
    Operation(KEEP, _report, _report),
    Operation("delete_mapped_lun",
              lambda d, a: d.drop(d.acl(a.target, a.params["initiator"])["mapped_luns"],
                                  lambda m: m["index"] == a.params["index"]),
              lambda x, a: x.mapped_lun(a).delete()),
    Operation("delete_acl",
              lambda d, a: d.drop(d.tpg(a.target)["node_acls"], lambda n: n["node_wwn"] == a.params["initiator"]),
              lambda x, a: x.acl(a.target, a.params["initiator"]).delete()),
    Operation("delete_lun",
              lambda d, a: d.drop(d.tpg(a.target)["luns"], lambda lu: lu["index"] == a.params["index"]),
              lambda x, a: x.rts.LUN(x.tpg(a.target), a.params["index"]).delete()),
    Operation("delete_portal",
              lambda d, a: d.drop(d.tpg(a.target)["portals"], lambda n: (strip_brackets(n["ip_address"]), n["port"])
                                  == (a.params["ip"], a.params["port"])),
              lambda x, a: x.portal(a, "lookup").delete()),
    Operation("delete_target",
              lambda d, a: d.drop(d.dump["targets"], lambda t: t["wwn"] == a.target),
              lambda x, a: x.target(a.target).delete()),
    Operation("delete_backstore",
              lambda d, a: d.drop(d.dump["storage_objects"], lambda so: so["name"] == a.params["name"]),
              lambda x, a: x.rts.BlockStorageObject(a.params["name"]).delete()),
    Operation("close_discovery", lambda d, a: d.close_discovery(), lambda x, a: x.close_discovery()),
    Operation("create_backstore",
              lambda d, a: d.dump["storage_objects"].append({
                  "name": a.params["name"], "plugin": "block", "dev": a.params["device"],
                  "readonly": a.params["readonly"], "wwn": a.params["wwn"],
                  "attributes": {"emulate_pr": a.params.get("emulate_pr", emulate_pr(a.params["readonly"]))}}),
              lambda x, a: x.create_backstore(a.params).delete, creates=True),
    Operation("create_target",
              lambda d, a: d.dump["targets"].append({"wwn": a.target, "fabric": "iscsi", "tpgs": []}),
              lambda x, a: x.create_target(a.target).delete, creates=True),
    Operation("create_tpg",
              lambda d, a: d.target(a.target)["tpgs"].append({"tag": a.params["tag"], "enable": False,
                                                              "attributes": {}, "luns": [], "portals": [],
                                                              "node_acls": []}),
              lambda x, a: x.rts.TPG(x.target(a.target), a.params["tag"], mode="create").delete, creates=True),
    Operation("set_tpg_attribute",
              lambda d, a: d.tpg(a.target).setdefault("attributes", {}).update({a.params["name"]: a.params["value"]}),
              lambda x, a: x.tpg(a.target).set_attribute(a.params["name"], str(a.params["value"]))),
    Operation("create_portal",
              lambda d, a: d.tpg(a.target)["portals"].append({"ip_address": a.params["ip"], "port": a.params["port"]}),
              lambda x, a: x.portal(a, "create").delete, creates=True),
    Operation("create_lun",
              lambda d, a: d.tpg(a.target)["luns"].append({"index": a.params["index"],
                                                           "storage_object": backstore_path(a.params["backstore"])}),
              lambda x, a: x.rts.LUN(x.tpg(a.target), a.params["index"],
                                     x.rts.BlockStorageObject(a.params["backstore"])).delete, creates=True),
    Operation("create_acl",
              lambda d, a: d.tpg(a.target)["node_acls"].append({"node_wwn": a.params["initiator"], "mapped_luns": []}),
              lambda x, a: x.rts.NodeACL(x.tpg(a.target), a.params["initiator"], mode="create").delete, creates=True),
    Operation("create_mapped_lun",
              lambda d, a: d.acl(a.target, a.params["initiator"])["mapped_luns"].append(
                  {"index": a.params["index"], "tpg_lun": a.params["tpg_lun"],
                   "write_protect": a.params["write_protect"]}),
              lambda x, a: x.rts.MappedLUN(x.acl(a.target, a.params["initiator"]), a.params["index"],
                                           a.params["tpg_lun"], write_protect=a.params["write_protect"]).delete,
              creates=True),
    Operation("set_write_protect",
              lambda d, a: d.mapped_lun(a).update(write_protect=a.params["value"]),
              lambda x, a: setattr(x.mapped_lun(a), "write_protect", a.params["value"])),
    Operation("set_auth",
              lambda d, a: d.set_acl_field(a, "chap_" + a.params["field"]),
              lambda x, a: setattr(x.acl(a.target, a.params["initiator"]), "chap_" + a.params["field"], value_of(a))),
    Operation("set_acl_tag",
              lambda d, a: d.set_acl_field(a, "tag"),
              lambda x, a: setattr(x.acl(a.target, a.params["initiator"]), "tag", a.params["value"])),
    Operation("enable_tpg",
              lambda d, a: d.tpg(a.target).update(enable=True),
              lambda x, a: setattr(x.tpg(a.target), "enable", True)),
)}
RANK = {name: i for i, name in enumerate(OPERATIONS)}  # the order of a plan


def ordered(steps: list[Step]) -> list[Step]:
    """A plan's steps in the order they run (``RANK``; stable within a kind)."""
    return sorted(steps, key=lambda s: RANK[s.kind])


def changes(steps: list[Step]) -> list[Step]:
    """The steps of a plan that change something (every one but the ``keep`` reports), in order."""
    return [s for s in steps if s.kind != KEEP]


def kept(steps: list[Step]) -> list[Step]:
    """The ``keep`` steps of a plan: reports of what is left alone."""
    return [s for s in steps if s.kind == KEEP]


def discovery_closed(dump: dict) -> bool:
    """Whether a dump (``RTSRoot().dump()``, or a live state's) shows SendTargets discovery closed: discovery
    authentication enforced for iSCSI and no discovery credential set (nobody can authenticate)."""
    dump = dump.get("dump", dump)
    iscsi = next((fm for fm in dump.get("fabric_modules", []) if fm.get("name") == "iscsi"), {})
    return bool(iscsi.get("discovery_enable_auth")) and not any(iscsi.get(f"discovery_{attr}")
                                                                for attr in DISCOVERY_CREDENTIALS)


# ---------------------------------------------------------------------------------------------
# Simulation and summaries (pure): the predicted "after" of a dry run, and readable diffs


def simulate(live: dict, steps: list[Step]) -> dict:
    """Apply a plan's steps to a copy of a live dict (as read_live returns), without touching the kernel."""
    out = copy.deepcopy(live)
    dump = out.setdefault("dump", {}) if "dump" in live or not live else out
    dump.setdefault("storage_objects", [])
    dump.setdefault("targets", [])
    model = DumpModel(dump)
    for s in changes(steps):
        OPERATIONS[s.kind].simulate(model, s)
    return out


def summarize(live: dict, state: DesiredState | None = None) -> dict:
    """A readable view of the project-owned LIO objects (secrets redacted)."""
    dump = live.get("dump", live)
    owns_t = state.owns_target if state else (lambda iqn: True)
    owns_b = state.owns_backstore if state else (lambda name: True)
    out: dict = {"backstores": {}, "targets": {}, "discovery": "closed" if discovery_closed(dump) else "open"}
    for so in dump.get("storage_objects", []):
        if owns_b(so["name"]):
            out["backstores"][so["name"]] = {"device": so.get("dev"), "readonly": so.get("readonly"),
                                             "wwn": so.get("wwn")}
    for t in dump.get("targets", []):
        if not owns_t(t["wwn"]):
            continue
        tpg = tpg_of(t) or {}
        attrs = tpg.get("attributes", {})
        out["targets"][t["wwn"]] = {
            "enabled": bool(tpg.get("enable")),
            "attributes": {k: attrs.get(k) for k in ("authentication", "generate_node_acls", "cache_dynamic_acls",
                                                     "demo_mode_write_protect")},
            "portals": sorted(f"{strip_brackets(p['ip_address'])}:{p['port']}" for p in tpg.get("portals", [])),
            "luns": {str(lu["index"]): lu.get("storage_object", "").rsplit("/", 1)[-1]
                     for lu in sorted(tpg.get("luns", []), key=lambda x: x["index"])},
            "acls": {a["node_wwn"]: {
                "mapped_luns": {str(m["index"]): {"tpg_lun": m.get("tpg_lun"),
                                                  "write_protect": bool(m.get("write_protect"))}
                                for m in sorted(a.get("mapped_luns", []), key=lambda x: x["index"])},
                "chap_userid": a.get("chap_userid", ""),
                "chap_password": REDACTED if a.get("chap_password") else "",
                "chap_mutual_userid": a.get("chap_mutual_userid", ""),
                "chap_mutual_password": REDACTED if a.get("chap_mutual_password") else ""}
                for a in tpg.get("node_acls", [])},
        }
    return out
