"""Retention's policies: the data (snapshots, policies, decisions, plans) and the configuration (``retention:``
of fabricctl's configuration: ``parse_policies``, ``parse_assign``, ``resolve_assignment``). The package's
docstring says what each rule keeps."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ...base.errors import UserError
from ...base.rules import check_keys, suggestion

POLICY_KEYS = ("keep_last", "keep_every", "hourly", "daily", "weekly", "monthly", "yearly", "keep_best",
               "pin_tags", "timezone", "calendar", "frequently", "frequent_period")
BEST_KEYS = ("metric", "mode", "count")
BEST_MODES = ("min", "max")
BUCKETS = ("hourly", "daily", "weekly", "monthly", "yearly")
NEWEST_PER_PERIOD, SANOID = "newest-per-period", "sanoid"
CALENDARS = (NEWEST_PER_PERIOD, SANOID)
# sanoid 2.x (prune_snapshots): the types it prunes, each period's length in seconds, and sanoid.defaults.conf's
# counts (2.1.0 and 2.2.0 alike); frequently's period is frequent_period minutes (default 15)
SANOID_TYPES = ("frequently", "hourly", "daily", "weekly", "monthly", "yearly")
SANOID_PERIODS = {"hourly": 60 * 60, "daily": 60 * 60 * 24, "weekly": 60 * 60 * 24 * 7, "monthly": 60 * 60 * 24 * 31,
                  "yearly": 60 * 60 * 24 * 365.25}
SANOID_DEFAULTS = {"frequently": 0, "hourly": 48, "daily": 90, "weekly": 0, "monthly": 6, "yearly": 0}
SANOID_FREQUENT_PERIOD = 15
RETENTION_KEYS = ("policies", "assign")
ASSIGN_ROOTS = ("checkpoints", "datasets")
_GLOB_CHARS = re.compile(r"[*?\[\]]")


# --- data -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    """One ZFS snapshot as the planner sees it (see ``snapshot_from_properties``)."""

    name: str                                   # "pool/ds@snap"
    created: datetime                           # timezone-aware
    step: int | None = None                     # fabric:step
    metrics: Mapping[str, float] = field(default_factory=dict, hash=False)   # fabric:metric.<name>
    tags: frozenset[str] = frozenset()          # fabric:tags
    held: bool = False                          # zfs hold (userrefs > 0)
    published: bool = False                     # fabric:published names a host
    managed: bool = True                        # fabric:managed=true
    named_by: frozenset[str] = frozenset()      # the tags naming a dataset version (fabric:tag:TAG on its volume)

    def __post_init__(self):
        if not isinstance(self.name, str) or self.name.count("@") != 1 or self.name.startswith("@") \
                or self.name.endswith("@"):
            raise ValueError(f"snapshot name {self.name!r} is not DATASET@SNAPSHOT")
        if not isinstance(self.created, datetime) or self.created.utcoffset() is None:
            raise ValueError(f"snapshot {self.name}: created must be a timezone-aware datetime, got {self.created!r}")

    @property
    def dataset(self) -> str:
        return self.name.split("@", 1)[0]

    @property
    def snapname(self) -> str:
        return self.name.split("@", 1)[1]


@dataclass(frozen=True)
class KeepBest:
    metric: str
    mode: str        # "min" or "max"
    count: int


@dataclass(frozen=True)
class Policy:
    """A named retention template; see the module docstring for each rule. ``None`` or 0: rule off."""

    name: str
    keep_last: int | None = None
    keep_every: int | None = None
    hourly: int | None = None
    daily: int | None = None
    weekly: int | None = None
    monthly: int | None = None
    yearly: int | None = None
    keep_best: tuple[KeepBest, ...] = ()
    pin_tags: frozenset[str] = frozenset()
    timezone: str = "UTC"
    calendar: str = NEWEST_PER_PERIOD
    frequently: int | None = None          # calendar: sanoid only
    frequent_period: int = SANOID_FREQUENT_PERIOD

    @property
    def keeps_something(self) -> bool:
        if self.calendar == SANOID:   # what sanoid does not prune is always kept (module docstring)
            return True
        counts = [self.keep_last, self.keep_every, *(getattr(self, b) for b in BUCKETS),
                  *(b.count for b in self.keep_best)]
        return any(c for c in counts)

    @property
    def other_rules(self) -> bool:
        """keep_last, keep_every or keep_best: a rule that is not a period count."""
        return bool(self.keep_last or self.keep_every or any(b.count for b in self.keep_best))

    def sanoid_counts(self) -> dict[str, tuple[int, bool]]:
        """calendar: sanoid: {type: (count, whether it is sanoid's default)} for SANOID_TYPES."""
        out = {}
        for t in SANOID_TYPES:
            given = getattr(self, t)
            out[t] = (SANOID_DEFAULTS[t], True) if given is None else (given, False)
        return out


@dataclass
class Decision:
    """What happens to one snapshot and why. ``reasons``: every reason it is kept, or the reason it
    is destroyed. ``notes``: what each rule that did not keep it found (for --explain)."""

    snapshot: Snapshot
    keep: bool
    reasons: list[str]
    notes: list[str] = field(default_factory=list)
    policy: str | None = None
    protected: bool = False       # held, published, pinned, unmanaged or in the future

    @property
    def action(self) -> str:
        return "keep" if self.keep else "destroy"

    def to_dict(self) -> dict[str, Any]:
        s = self.snapshot
        return {"name": s.name, "dataset": s.dataset, "created": s.created.isoformat(), "step": s.step,
                "action": self.action, "keep": self.keep, "protected": self.protected, "policy": self.policy,
                "reasons": list(self.reasons), "notes": list(self.notes)}


@dataclass
class Plan:
    """Decisions for every snapshot given to ``plan``, oldest first by (created, name)."""

    now: datetime
    decisions: list[Decision]

    @property
    def keep(self) -> list[Decision]:
        return [d for d in self.decisions if d.keep]

    @property
    def destroy(self) -> list[Decision]:
        return [d for d in self.decisions if not d.keep]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, for ``fabricctl rotate --json``."""
        return {"now": self.now.isoformat(), "kept": len(self.keep), "destroyed": len(self.destroy),
                "decisions": [d.to_dict() for d in self.decisions]}


# --- configuration ---------------------------------------------------------------------------------

def _closest(word: str, choices: Iterable[str]) -> str:
    hint = suggestion(word, choices)
    return f"; {hint}" if hint else ""


def _count(value: Any, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{where} must be a whole number >= {minimum}, got {value!r}",
                        f"write a count such as `{where.rsplit('.', 1)[-1]}: 5`")
    if value < minimum:
        what = "negative" if value < 0 else "too small"
        raise UserError(f"{where} is {what} ({value}); it must be a whole number >= {minimum}",
                        "counts are numbers of snapshots to keep; use 0 (or leave the key out) to switch a rule off"
                        if minimum == 0 else f"use {minimum} or more")
    return value


def _timezone(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise UserError(f"{where} must be an IANA time zone name, got {value!r}",
                        "for example `Europe/Berlin` or `UTC`")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        import zoneinfo
        raise UserError(f"{where}: unknown time zone {value!r}{_closest(value, zoneinfo.available_timezones())}",
                        "use an IANA time zone name such as `Europe/Berlin`, `America/New_York` or `UTC`") from None
    return value


def _keep_best(value: Any, where: str, metrics: list[str]) -> tuple[KeepBest, ...]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise UserError(f"{where} is an empty list", "give {metric: NAME, mode: min|max, count: N} or leave it out")
    rules = []
    for i, item in enumerate(items):
        here = f"{where}[{i}]" if isinstance(value, list) else where
        if not isinstance(item, Mapping):
            raise UserError(f"{here} must be a mapping {{metric, mode, count}}, got {item!r}",
                            "write `keep_best: {metric: loss, mode: min, count: 3}`")
        check_keys(item, BEST_KEYS, here)
        for key in BEST_KEYS:
            if key not in item:
                raise UserError(f"{here}: missing key {key!r}",
                                "write `keep_best: {metric: loss, mode: min, count: 3}`")
        metric, mode = item["metric"], item["mode"]
        known = ", ".join(metrics) if metrics else "(none declared)"
        if not isinstance(metric, str) or metric not in metrics:
            raise UserError(f"{here}.metric: unknown metric {metric!r}{_closest(metric, metrics)} "
                            f"(known metrics: {known})",
                            "use one of the metrics listed under `metrics:` or add it there")
        if mode not in BEST_MODES:
            raise UserError(f"{here}.mode: unknown mode {mode!r}{_closest(str(mode), BEST_MODES)}",
                            "use `min` (lower is better, e.g. loss) or `max` (higher is better, e.g. accuracy)")
        rules.append(KeepBest(metric, mode, _count(item["count"], f"{here}.count")))
    return tuple(rules)


def _pin_tags(value: Any, where: str) -> frozenset[str]:
    if not isinstance(value, list):
        raise UserError(f"{where} must be a list of tags, got {value!r}", "write `pin_tags: [release]`")
    for tag in value:
        if not isinstance(tag, str) or not tag.strip() or "," in tag or tag != tag.strip():
            raise UserError(f"{where}: invalid tag {tag!r}: tags are non-empty words without ',' or surrounding spaces",
                            "write `pin_tags: [release, best]`")
    return frozenset(value)


def parse_policies(raw: Mapping | None, metrics: list[str]) -> dict[str, Policy]:
    """Validate ``retention.policies`` (name -> mapping of rules) into Policy objects.

    Raises UserError for an unknown key (with the closest valid one), a count that is negative or
    not a whole number (``true`` is not a number), a metric not in ``metrics``, a mode other than
    min/max, an unknown time zone, or a policy that keeps nothing by any rule.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise UserError(f"retention.policies must be a mapping of policy name to rules, got {type(raw).__name__}",
                        "write `retention: {policies: {NAME: {keep_last: 5}}}`")
    policies: dict[str, Policy] = {}
    for name, body in raw.items():
        where = f"retention.policies.{name}"
        if not isinstance(name, str) or not name.strip():
            raise UserError(f"retention.policies: invalid policy name {name!r}",
                            "name policies with words, e.g. `daily`")
        if not isinstance(body, Mapping):
            raise UserError(f"{where} must be a mapping of rules, got {body!r}", f"write `{name}: {{keep_last: 5}}`")
        check_keys(body, POLICY_KEYS, where)
        kwargs: dict[str, Any] = {}
        calendar = body.get("calendar", NEWEST_PER_PERIOD)
        if calendar not in CALENDARS:
            raise UserError(f"{where}.calendar: unknown calendar {calendar!r}{_closest(str(calendar), CALENDARS)}",
                            "use `newest-per-period` (the default: the newest snapshot of each of the N newest "
                            "periods) or `sanoid` (what sanoid's counts keep, for sites migrating from sanoid)")
        if calendar != SANOID:
            for key in ("frequently", "frequent_period"):
                if key in body:
                    raise UserError(f"{where}.{key} is a count of sanoid's and needs `calendar: sanoid`",
                                    f"add `calendar: sanoid` to {where}, or remove {key}")
        elif "timezone" in body:
            raise UserError(f"{where}.timezone has no effect with `calendar: sanoid` (sanoid ages snapshots in "
                            "seconds, with no calendar)", f"remove {where}.timezone")
        kwargs["calendar"] = calendar
        for key in ("keep_last", *BUCKETS, "frequently"):
            if body.get(key) is not None:
                kwargs[key] = _count(body[key], f"{where}.{key}")
        if body.get("frequent_period") is not None:
            kwargs["frequent_period"] = _count(body["frequent_period"], f"{where}.frequent_period", minimum=1)
        if body.get("keep_every") is not None:
            kwargs["keep_every"] = _count(body["keep_every"], f"{where}.keep_every", minimum=1)
        if body.get("keep_best") is not None:
            kwargs["keep_best"] = _keep_best(body["keep_best"], f"{where}.keep_best", list(metrics or []))
        if body.get("pin_tags") is not None:
            kwargs["pin_tags"] = _pin_tags(body["pin_tags"], f"{where}.pin_tags")
        if body.get("timezone") is not None:
            kwargs["timezone"] = _timezone(body["timezone"], f"{where}.timezone")
        policy = Policy(name=name, **kwargs)
        if not policy.keeps_something:
            raise UserError(f"{where} keeps no snapshot by any rule: it would destroy every snapshot that is not "
                            "held, published, pinned or unmanaged",
                            "add a rule such as `keep_last: 5` (a count of 0 switches a rule off)")
        policies[name] = policy
    return policies


def parse_assign(raw: Mapping | None, policies: Mapping[str, Policy]) -> dict[str, str]:
    """Validate ``retention.assign`` (path or glob -> policy name)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise UserError(f"retention.assign must be a mapping of path to policy name, got {type(raw).__name__}",
                        'write `assign: {"checkpoints/*": checkpoints-default}`')
    assign: dict[str, str] = {}
    for pattern, name in raw.items():
        where = f"retention.assign.{pattern}"
        root = pattern.split("/", 1)[0] if isinstance(pattern, str) else None
        if root not in ASSIGN_ROOTS or "/" not in pattern or not pattern.split("/", 1)[1]:
            raise UserError(f"retention.assign: invalid path {pattern!r}: it must be checkpoints/JOB or datasets/NAME "
                            "(globs allowed after the '/')",
                            'write for example `"checkpoints/*": POLICY` or `"datasets/imagenet": POLICY`')
        if not isinstance(name, str) or name not in policies:
            known = ", ".join(sorted(policies)) or "(none defined)"
            raise UserError(f"{where}: unknown policy {name!r}{_closest(str(name), policies)} (policies: {known})",
                            "name a policy defined under retention.policies")
        assign[pattern] = name
    return assign


@dataclass(frozen=True)
class Retention:
    policies: dict[str, Policy]
    assign: dict[str, str]

    def policy_for(self, path: str) -> Policy | None:
        return resolve_assignment(self.assign, self.policies, path)


def parse_retention(raw: Mapping | None, metrics: list[str]) -> Retention:
    """Validate the whole ``retention:`` section ({policies, assign})."""
    if raw is None:
        return Retention({}, {})
    if not isinstance(raw, Mapping):
        raise UserError(f"retention must be a mapping with `policies` and `assign`, got {type(raw).__name__}",
                        "see the configuration example in the documentation")
    check_keys(raw, RETENTION_KEYS, "retention")
    policies = parse_policies(raw.get("policies"), metrics)
    return Retention(policies, parse_assign(raw.get("assign"), policies))


def resolve_assignment(assign: Mapping[str, str], policies: Mapping[str, Policy], path: str) -> Policy | None:
    """The policy of ``path`` ("checkpoints/JOB", "datasets/NAME"), or None when nothing matches.

    Exact match first; else the longest matching glob, then fewer wildcard characters, then the
    alphabetically first pattern.
    """
    if path in assign:
        chosen = path
    else:
        matching = [p for p in assign if _GLOB_CHARS.search(p) and fnmatch.fnmatchcase(path, p)]
        if not matching:
            return None
        chosen = min(matching, key=lambda p: (-len(p), len(_GLOB_CHARS.findall(p)), p))
    name = assign[chosen]
    if name not in policies:
        raise UserError(f"retention.assign.{chosen}: unknown policy {name!r}{_closest(name, policies)}",
                        "name a policy defined under retention.policies")
    return policies[name]
