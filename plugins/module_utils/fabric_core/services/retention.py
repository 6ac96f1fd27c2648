"""Snapshot retention: named policies, their assignment to datasets and jobs, and a pure planner.

``fabricctl rotate`` reads the snapshots of every checkpoint job and dataset, resolves the policy
assigned to each (``resolve_assignment``), asks ``plan`` which snapshots to keep and which to
destroy, and destroys the latter with one ``lzc_destroy_snaps`` per dataset (``batches``). The
planner is a pure function: no command, no clock (``now`` is an argument), no randomness; the
same snapshots, policy and ``now`` always give the same plan, and every decision says why.

Configuration (``retention:`` in /etc/fabricctl/config.yml)::

    metrics: [loss, accuracy]
    retention:
      policies:
        checkpoints-default:
          keep_last: 5
          keep_every: 1000
          daily: 7
          keep_best: {metric: loss, mode: min, count: 3}   # or a list of such mappings
          pin_tags: [release]
          timezone: Europe/Berlin                          # calendar of the buckets; default UTC
        from-sanoid:                                       # a site migrating from sanoid
          calendar: sanoid                                 # the counts mean what sanoid's do (below)
          hourly: 36
          daily: 30
          monthly: 3
      assign:
        "checkpoints/*": checkpoints-default
        "datasets/imagenet": versions-default

Rules
-----
Every rule is evaluated on its own over the *candidates* of one dataset: the snapshots created by
fabricctl (``fabric:managed=true``) that are not in the future. A snapshot is kept when at least one
rule selects it (the decision lists every rule that does), or when it is protected; otherwise it
is destroyed. Rules do not take turns as in ``borg prune`` (where a snapshot kept by one rule no
longer counts for the next): like ``restic forget``, each rule sees all candidates, so
``keep_last: 5, daily: 7`` keeps the 5 newest snapshots plus the newest snapshot of each of the 7
newest days, and these sets usually overlap. A count of 0 switches a rule off.

Order. "Newest" means last in the order (created, name): two snapshots with the same creation time
are ordered by name. Decisions are reported oldest first in that order.

``keep_last: N``
    The N newest candidates. Snapshots ``@a..@h`` created one hour apart, ``keep_last: 3`` keeps
    ``@f @g @h`` ("last 3 (#1)" is the newest).

``keep_every: K``
    Every candidate whose ``fabric:step`` is a multiple of K (``step % K == 0``; step 0 counts).
    Steps 500, 1000, 1500, 2000 with ``keep_every: 1000`` keep 1000 and 2000. Snapshots without a
    step (dataset versions) never match. K must be at least 1.

``hourly / daily / weekly / monthly / yearly: N`` (``calendar: newest-per-period``, the default)
    The newest candidate of each of the N newest calendar periods that have one: the rule of
    ``restic forget --keep-hourly/--keep-daily/...``, not sanoid's (for sanoid's, see
    ``calendar: sanoid`` below). Take the periods that contain at least one candidate, newest
    first; the current period, still running, counts as one of them; in each of the N newest such
    periods keep the **newest** candidate, because it holds everything the period produced so far.
    Periods without a snapshot do not count, so a job that stopped running keeps N snapshots per
    rule forever instead of losing them to the passing of time. Example: snapshots every 6 hours
    from Mon 00:00 to Wed 18:00 and ``daily: 2`` keep Wed 18:00 and Tue 18:00, whatever ``now``
    is (sanoid's ``daily = 2`` would keep every snapshot named daily younger than 48 hours and at
    least the 2 newest of them).

    Periods are calendar periods in the policy's ``timezone`` (IANA name, default UTC):

    - hourly: a local wall-clock hour *and its UTC offset*. At a DST fall-back the repeated hour
      (01:00-02:00 twice in New York) is two buckets, one per real hour, labelled with their
      offsets (``2026-11-01 01:00-04:00`` and ``2026-11-01 01:00-05:00``); at a spring-forward the
      skipped hour does not exist, so no snapshot can fall in it. The number of hourly buckets is
      therefore the number of real hours that contain a snapshot: DST neither creates nor loses
      one (this equals bucketing by UTC hour for zones with whole-hour offsets, but keeps local
      hour boundaries for zones such as Asia/Kolkata).
    - daily: the local calendar date (a DST day of 23 or 25 hours is one bucket; 2028-02-29 is a
      day like any other).
    - weekly: the ISO 8601 week (Monday to Sunday, ``2026-W53``); a week that straddles the new
      year is ONE bucket (2026-12-31 and 2027-01-01 are both in 2026-W53).
    - monthly: the local calendar month; yearly: the local calendar year.

``calendar: sanoid`` (for sites migrating from sanoid)
    The period counts (``frequently``, ``hourly``, ``daily``, ``weekly``, ``monthly``,
    ``yearly``; ``frequent_period`` minutes, 15 by default) mean what they mean in a sanoid 2.x
    ``sanoid.conf`` section with ``autoprune = yes``, and apply to the snapshots sanoid prunes:
    those whose name starts with ``autosnap`` and ends in ``_<type>`` (sanoid's own names, e.g.
    ``autosnap_2026-11-20_10:00:00_hourly``; the type is what sanoid's regular expression
    ``.*_(\\w*ly)`` finds). For each type with count N, read from sanoid's ``prune_snapshots``:
    the snapshots of that type are taken oldest first (by ``creation``), and one is destroyed
    while it is older than N periods (``creation < now - N x period``; a period is 60 x
    ``frequent_period`` s, 1 h, 24 h, 7 days, 31 days or 365.25 days, not a calendar period)
    and more than N of the type are left. So every snapshot of the type younger than N periods
    is kept, and never fewer than the N newest; a count of 0 destroys every snapshot of the type
    (as sanoid does). A count left out is sanoid's default (sanoid.defaults.conf 2.x:
    ``hourly = 48``, ``daily = 90``, ``monthly = 6``, the others 0), as for a sanoid section that
    does not set it. The clock is sanoid's: whole seconds (``now`` truncated). A sanoid-named
    snapshot is a candidate even when fabricctl did not take it (sanoid's, on a volume fabricctl
    owns: choosing this mode hands its pruning to fabricctl); it is still protected as any other
    (held, published, tagged, pinned, in the future). Sanoid counts a protected snapshot of a
    type and would try to destroy it; fabricctl counts it the same and keeps it. Two snapshots of
    a type created in the same second are ordered by name (sanoid's order for them is Perl's hash
    order, which varies from run to run).

    Snapshots sanoid would not prune (any other name, e.g. fabricctl's ``step-N``) are not
    touched by the counts: with no ``keep_last``, ``keep_every`` or ``keep_best`` in the policy
    they are kept, as sanoid keeps them; with one of these, those rules decide for them.
    ``keep_last``, ``keep_every`` and ``keep_best`` see every candidate, sanoid-named ones
    included, and can only keep more, so a policy with period counts only keeps exactly what
    sanoid keeps on the same snapshots (tests/unit/test_retention.py runs Debian's sanoid on the
    same lists). ``timezone`` is refused in this mode (sanoid's pruning has no calendar).

``keep_best: {metric: M, mode: min|max, count: N}``
    The N candidates with the lowest (``min``) or highest (``max``) value of ``fabric:metric.M``;
    ``metric`` must be listed in the top-level ``metrics``. Ties are broken by recency: of two
    snapshots with an equal value the newer ranks first (it holds more training for the same
    score), and the reason says so. A snapshot without the metric, or with NaN, takes no part in
    the ranking (its decision carries a note) but can still be kept by any other rule. A list of
    such mappings keeps the best by several metrics.

``pin_tags: [T, ...]``
    Protection, not a counting rule: a snapshot whose ``fabric:tags`` contains T is never
    destroyed ("pinned by tag T"). It still takes part in the rules above.

Protection
----------
Never destroyed, whatever the rules say, and reported as such:

- held (a ``zfs hold``, ``userrefs > 0``), published (``fabric:published`` names a host), pinned, or a
  dataset version a tag names (``fabricctl tag``: ``named_by``); these are candidates too and count in the
  rules (a published version is one of the last 5);
- not created by fabricctl (no ``fabric:managed=true``): kept, and not a candidate, so an
  operator's own snapshots never take a slot of ``keep_last``;
- created after ``now`` (clock skew): kept, and not a candidate, so a snapshot from a skewed
  clock cannot push the real newest ones out of ``keep_last``.

A policy that keeps nothing by any rule (every count absent or 0) is refused by
``parse_policies``: it would destroy every snapshot that is not protected.

Assignment
----------
``assign`` maps a path (``checkpoints/JOB`` or ``datasets/NAME``) or an ``fnmatch`` glob of paths
(case-sensitive; ``*`` also matches ``/``) to a policy name. An exact path wins over every glob;
among matching globs the longest pattern wins, then the one with fewer wildcard characters, then
the alphabetically first. A path that matches nothing has no policy: nothing of it is destroyed.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..base.errors import UnsafeOperation, UserError
from ..base.rules import check_keys, suggestion

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
_SANOID_TYPE = re.compile(r".*_(\w*ly)", re.ASCII)  # sanoid's getsnaps: my ($snaptype) = ($snapname =~ m/.*_(\w*ly)/)
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


# --- reading snapshots ---------------------------------------------------------------------------

def _prop(props: Mapping[str, str], key: str) -> str | None:
    value = props.get(key)
    if value is None:
        return None
    value = str(value).strip()
    return None if value in ("", "-") else value


def snapshot_from_properties(name: str, props: Mapping[str, str], *, held: bool | None = None,
                             named_by: Iterable[str] = ()) -> Snapshot:
    """A Snapshot from ZFS properties as strings (``zfs get -Hp`` values; "-" means unset).

    created: ``fabric:created-at`` (ISO 8601) when set, else ``creation`` (seconds since the epoch).
    held: ``userrefs > 0`` unless given. managed: ``fabric:managed`` is ``true``. A malformed value
    raises UserError (rotation changes nothing rather than guess).
    """
    def bad(key: str, value: str, fix: str) -> UserError:
        return UserError(f"snapshot {name}: invalid {key} {value!r}", fix)

    created: datetime | None = None
    if (value := _prop(props, "fabric:created-at")) is not None:
        try:
            created = datetime.fromisoformat(value)
        except ValueError:
            raise bad("fabric:created-at", value, "set it to an ISO 8601 time such as 2026-11-20T10:00:00Z") from None
        if created.utcoffset() is None:
            created = created.replace(tzinfo=UTC)   # fabricctl writes UTC
    elif (value := _prop(props, "creation")) is not None:
        try:
            created = datetime.fromtimestamp(int(value), UTC)
        except (ValueError, OverflowError):
            raise bad("creation", value, "read it with `zfs get -Hp creation` (seconds since the epoch)") from None
    if created is None:
        raise UserError(f"snapshot {name}: no creation time (neither fabric:created-at nor creation)",
                        "read the `creation` property along with the fabric: properties")
    step = None
    if (value := _prop(props, "fabric:step")) is not None:
        try:
            step = int(value)
        except ValueError:
            raise bad("fabric:step", value, "fabric:step is a whole number") from None
    metrics: dict[str, float] = {}
    for key in props:
        if key.startswith("fabric:metric.") and (value := _prop(props, key)) is not None:
            try:
                metrics[key[len("fabric:metric."):]] = float(value)
            except ValueError:
                raise bad(key, value, "metrics are numbers such as 0.213") from None
    tags = frozenset(t.strip() for t in (_prop(props, "fabric:tags") or "").split(",") if t.strip())
    published = bool([h for h in (_prop(props, "fabric:published") or "").split(",") if h.strip()])
    if held is None:
        try:
            held = int(_prop(props, "userrefs") or "0") > 0
        except ValueError:
            raise bad("userrefs", str(props.get("userrefs")), "read it with `zfs get -Hp userrefs`") from None
    return Snapshot(name=name, created=created, step=step, metrics=metrics, tags=tags, held=held,
                    published=published, managed=(_prop(props, "fabric:managed") or "").lower() == "true",
                    named_by=frozenset(named_by))


# --- planning -------------------------------------------------------------------------------------

def _order(s: Snapshot) -> tuple[datetime, str]:
    return (s.created, s.name)


def _period(rule: str, when: datetime, tz: ZoneInfo) -> tuple[tuple, str]:
    """(bucket key, label) of ``when`` for a calendar rule, in local time of ``tz``."""
    local = when.astimezone(tz)
    if rule == "hourly":
        offset = local.utcoffset()
        minutes = int(offset.total_seconds()) // 60
        sign = "+" if minutes >= 0 else "-"
        label = f"{local:%Y-%m-%d %H}:00{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
        return (local.year, local.month, local.day, local.hour, minutes), label
    if rule == "daily":
        return (local.year, local.month, local.day), f"{local:%Y-%m-%d}"
    if rule == "weekly":
        iso = local.isocalendar()
        return (iso.year, iso.week), f"{iso.year}-W{iso.week:02d}"
    if rule == "monthly":
        return (local.year, local.month), f"{local:%Y-%m}"
    return (local.year,), f"{local:%Y}"


def sanoid_type(snapname: str) -> str | None:
    """The type sanoid 2.x gives a snapshot it prunes (its getsnaps: the name ends in "ly" and starts with
    "autosnap", the type is what ``.*_(\\w*ly)`` captures), when it is one of SANOID_TYPES; else None (sanoid never
    prunes it)."""
    if not snapname.startswith("autosnap") or not snapname.endswith("ly"):
        return None
    m = _SANOID_TYPE.match(snapname)
    return m.group(1) if m and m.group(1) in SANOID_TYPES else None


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600)):
        if seconds >= size:
            return f"{seconds / size:g} {unit}"
    return f"{seconds / 60:g} min"


def _plan_sanoid(typed: list[Snapshot], policy: Policy, now: datetime, keep: dict[str, list[str]],
                 notes: dict[str, list[str]]) -> None:
    """calendar: sanoid on the sanoid-named snapshots of one dataset (every one, protected or not: sanoid counts
    them all), as sanoid's prune_snapshots decides: per type, oldest first, destroy while older than count x
    period and more than count are left."""
    clock = math.floor(now.timestamp())   # sanoid's time(): whole seconds
    by_type: dict[str, list[Snapshot]] = {}
    for s in typed:
        by_type.setdefault(sanoid_type(s.snapname), []).append(s)
    for kind, count_default in policy.sanoid_counts().items():
        snaps = sorted(by_type.get(kind, ()), key=_order)   # sanoid: by creation; same second: by name
        if not snaps:
            continue
        n, default = count_default
        period = 60 * policy.frequent_period if kind == "frequently" else SANOID_PERIODS[kind]
        cutoff = clock - n * period
        label = f"sanoid {kind} = {n}{' (sanoid' + chr(39) + 's default)' if default else ''}"
        when = datetime.fromtimestamp(cutoff, UTC).isoformat()
        left = len(snaps)
        for rank_from_oldest, s in enumerate(snaps):
            newest_rank = len(snaps) - rank_from_oldest
            if s.created.timestamp() < cutoff and left > n:
                left -= 1
                notes[s.name].append(f"{label}: created before {when} ({n} x {_duration(period)} before now) and "
                                     f"not one of the {n} newest {kind} snapshots (#{newest_rank})")
            elif s.created.timestamp() >= cutoff:
                keep[s.name].append(f"{label}: created after {when} ({n} x {_duration(period)} before now)")
            else:
                keep[s.name].append(f"{label}: one of the {n} newest {kind} snapshots (#{newest_rank}; sanoid "
                                    f"keeps at least {n})")


def _metric_text(value: float) -> str:
    return repr(float(value))


def _plan_group(candidates: list[Snapshot], policy: Policy, keep: dict[str, list[str]],
                notes: dict[str, list[str]]) -> None:
    """Apply every rule of ``policy`` to the candidates of one dataset (oldest first)."""
    newest_first = candidates[::-1]
    if policy.keep_last:
        n = policy.keep_last
        for rank, s in enumerate(newest_first, 1):
            if rank <= n:
                keep[s.name].append(f"last {n} (#{rank})")
            else:
                notes[s.name].append(f"not among the last {n} (#{rank})")
    if policy.keep_every:
        k = policy.keep_every
        for s in candidates:
            if s.step is not None and s.step % k == 0:
                keep[s.name].append(f"every {k}th step (step {s.step})")
            else:
                notes[s.name].append(f"step {s.step} is not a multiple of {k}" if s.step is not None
                                     else f"no step (fabric:step), so not kept by every {k}th step")
    tz = ZoneInfo(policy.timezone)
    for rule in BUCKETS if policy.calendar == NEWEST_PER_PERIOD else ():
        n = getattr(policy, rule)
        if not n:
            continue
        seen: dict[tuple, int] = {}     # period key -> its rank, newest period first
        for s in newest_first:
            key, label = _period(rule, s.created, tz)
            if key in seen:
                notes[s.name].append(f"{rule} {label}: a newer snapshot keeps this period"
                                     if seen[key] <= n else f"{rule} {label}: older than the {n} newest periods")
                continue
            seen[key] = len(seen) + 1
            if seen[key] <= n:
                keep[s.name].append(f"{rule} {label} (#{seen[key]} of {n})")
            else:
                notes[s.name].append(f"{rule} {label}: older than the {n} newest periods")
    position = {s.name: i for i, s in enumerate(candidates)}
    for best in policy.keep_best:
        label = f"best {best.count} by {best.metric} {best.mode}"
        ranked = []
        for s in candidates:
            value = s.metrics.get(best.metric)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                why = "is NaN" if value is not None else "missing"
                notes[s.name].append(f"metric {best.metric} {why}: not ranked by {label}")
                continue
            ranked.append((float(value), s))
        sign = 1 if best.mode == "min" else -1
        ranked.sort(key=lambda vs: (sign * vs[0], -position[vs[1].name]))   # tie: newer first
        counts: dict[float, int] = {}
        for value, _snapshot in ranked:
            counts[value] = counts.get(value, 0) + 1
        for rank, (value, s) in enumerate(ranked, 1):
            tie = f"; tied with {counts[value] - 1} other(s), newer ranks first" if counts[value] > 1 else ""
            if rank <= best.count:
                keep[s.name].append(f"{label} (#{rank}, {_metric_text(value)}{tie})")
            elif best.count:
                notes[s.name].append(f"{best.metric} {_metric_text(value)} ranks #{rank}, outside {label}{tie}")


def plan(snapshots: Iterable[Snapshot], policy: Policy | None, now: datetime) -> Plan:
    """Decide, for every snapshot, keep or destroy, and why. Pure: same input, same plan.

    The rules are applied per dataset (snapshots of several datasets may be given together).
    ``policy=None`` (no assignment) keeps everything.
    """
    if not isinstance(now, datetime) or now.utcoffset() is None:
        raise ValueError(f"now must be a timezone-aware datetime, got {now!r}")
    snaps = sorted(snapshots, key=_order)
    names = [s.name for s in snaps]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"snapshots given twice: {', '.join(dupes)}")
    keep: dict[str, list[str]] = {s.name: [] for s in snaps}
    notes: dict[str, list[str]] = {s.name: [] for s in snaps}
    protect: dict[str, list[str]] = {s.name: [] for s in snaps}
    pin_tags = policy.pin_tags if policy else frozenset()
    sanoid = policy is not None and policy.calendar == SANOID
    groups: dict[str, list[Snapshot]] = {}
    typed: dict[str, list[Snapshot]] = {}   # calendar: sanoid: the snapshots sanoid prunes, per dataset
    for s in snaps:
        p = protect[s.name]
        adopted = sanoid and sanoid_type(s.snapname) is not None
        if adopted:
            typed.setdefault(s.dataset, []).append(s)
        if s.created > now:
            p.append(f"created in the future ({s.created.isoformat()} is after now {now.isoformat()}; clock skew?)")
        if not s.managed and not adopted:
            p.append("not created by fabricctl (no fabric:managed)")
        if s.held:
            p.append("held")
        if s.published:
            p.append("published")
        for tag in sorted(s.tags & pin_tags):
            p.append(f"pinned by tag {tag}")
        for tag in sorted(s.named_by):
            p.append(f"tagged {tag} (a dataset version a tag names: `fabricctl untag` or move the tag to let it go)")
        if (s.managed or adopted) and s.created <= now:
            groups.setdefault(s.dataset, []).append(s)
    if policy is not None:
        for group in groups.values():
            _plan_group(group, policy, keep, notes)
    if sanoid:
        for group in typed.values():
            _plan_sanoid(group, policy, now, keep, notes)
        for group in groups.values():
            for s in group:
                if sanoid_type(s.snapname) is None and not policy.other_rules:
                    keep[s.name].append("calendar sanoid: not a name sanoid prunes (autosnap_..._TYPE), and the "
                                        "policy has no keep_last, keep_every or keep_best: kept, as sanoid keeps it")
    decisions = []
    for s in snaps:
        reasons = protect[s.name] + keep[s.name]
        if policy is None:
            reasons.append("no retention policy assigned")
        kept = bool(reasons)
        if not kept:
            reasons = [f"matched no rule of policy {policy.name}"]
        decisions.append(Decision(snapshot=s, keep=kept, reasons=reasons, notes=notes[s.name],
                                  policy=policy.name if policy else None, protected=bool(protect[s.name])))
    result = Plan(now=now, decisions=decisions)
    unsafe = [d.snapshot.name for d in result.destroy if d.protected]
    if unsafe:   # cannot happen; the last line of defence before anything is destroyed
        raise UnsafeOperation(f"retention plan would destroy protected snapshots: {', '.join(unsafe)}",
                              "report this as a bug; nothing was destroyed")
    return result


def combine(plans: Iterable[Plan]) -> Plan:
    """One plan out of the plans of several datasets (each planned with its own policy)."""
    plans = list(plans)
    if not plans:
        raise ValueError("combine() needs at least one plan")
    decisions = sorted((d for p in plans for d in p.decisions), key=lambda d: _order(d.snapshot))
    return Plan(now=plans[0].now, decisions=decisions)


def batches(plan: Plan) -> dict[str, list[str]]:
    """Snapshot names to destroy, grouped by dataset (sorted), oldest first within each dataset:
    one ``lzc_destroy_snaps`` call per dataset."""
    out: dict[str, list[str]] = {}
    for d in plan.destroy:
        out.setdefault(d.snapshot.dataset, []).append(d.snapshot.name)
    return {ds: out[ds] for ds in sorted(out)}


def explain_text(plan: Plan, *, notes: bool = True) -> str:
    """A human table, one line per snapshot (oldest first), then a summary line.

    ``KEEP    pool/ds@snap  reason; reason`` or ``DESTROY pool/ds@snap  matched no rule ...: note; note``.
    """
    width = max((len(d.snapshot.name) for d in plan.decisions), default=0)
    lines = []
    for d in plan.decisions:
        text = "; ".join(d.reasons)
        if not d.keep and notes and d.notes:
            text += ": " + "; ".join(d.notes)
        lines.append(f"{'KEEP' if d.keep else 'DESTROY':<7} {d.snapshot.name:<{width}}  {text}")
    lines.append(f"{len(plan.keep)} kept, {len(plan.destroy)} to destroy (now {plan.now.isoformat()})")
    return "\n".join(lines) + "\n"
