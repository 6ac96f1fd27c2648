"""Retention's planner (pure: no command, no clock, no randomness): snapshots read from their ZFS properties
(``snapshot_from_properties``), ``plan`` (what a policy keeps and destroys, and why), ``combine``, ``batches`` (one
``lzc_destroy_snaps`` per dataset) and ``explain_text``."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from ...base.errors import UnsafeOperation, UserError
from .policies import BUCKETS, NEWEST_PER_PERIOD, SANOID, SANOID_PERIODS, SANOID_TYPES, Decision, Plan, Policy, Snapshot

_SANOID_TYPE = re.compile(r".*_(\w*ly)", re.ASCII)  # sanoid's getsnaps: my ($snaptype) = ($snapname =~ m/.*_(\w*ly)/)


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
