"""A storage node's health as checks: pure functions of what was read, the clock passed in (``now``, epoch
seconds), each returning a ``Check`` that says why in one line.

A check's state is one of the monitoring-plugin states (Nagios, Icinga, Checkmk, Zabbix's and Sensu's
plugin runners): OK 0, WARNING 1, CRITICAL 2, UNKNOWN 3 (``EXIT_CODES``). ``overall`` folds the checks into
one state, the worst (CRITICAL > WARNING > UNKNOWN > OK: a degraded pool stays CRITICAL even when another
source could not be read), and ``status_line`` into the plugin's one line with performance data:
``FABRIC CRITICAL - pool tank DEGRADED: /dev/disk/by-id/ata-X UNAVAIL | capacity=12%;80;90;0;100 ...``.

The checks and their policies (the thresholds are ``Thresholds``; fabricctl's ``health:`` configuration):

- ``pool_state``: ONLINE is OK; any other pool state (DEGRADED, FAULTED, UNAVAIL, SUSPENDED, ...) is CRITICAL
  and names the devices that are not ONLINE (a pulled disk, named by the path it had); an ONLINE pool with a
  device that is not (a cache device gone) is WARNING.
- ``device_errors``: any nonzero READ/WRITE/CKSUM counter of any node of the vdev tree is WARNING, naming the
  device and its counts (``zpool clear`` resets them once the cause is known).
- ``data_errors``: permanent data errors (``error_count``) are CRITICAL.
- ``scrub``: the age of the last completed scrub (from its end) against scrub_warn_days/scrub_critical_days; a
  scrub in progress (or paused) is aged from its start; a pool never scrubbed from its creation when that is
  known (else WARNING); a resilver in progress is WARNING; a last scan that found errors or repaired data is
  WARNING; a canceled scrub is WARNING (zpool keeps only the last scan: after a resilver or a canceled scrub
  the scrub before it is no longer known).
- ``capacity``: the pool's capacity against capacity_warn_percent/capacity_critical_percent.
- ``chap``, ``discovery``: exports without CHAP and open SendTargets discovery are WARNING.
- ``sessions``: a host with an ACL on a target of the fabric but no session to it is WARNING (it was published
  to and is not logged in: down, or logged out by hand).
- ``foreign_acls``: an ACL of an initiator no configured host has is WARNING (``fabricctl access sync`` revokes it).
- ``reservations``: a SCSI reservation on a read-only export (or on a writable volume, by another host than its
  writer) is CRITICAL: it stops the other hosts' I/O; an SPC-3 registration on a read-only export, and a read-only
  export that allows reservations (emulate_pr 1, made before the fabric refused them), are WARNING.
- ``holds``: a replication hold (``fabric:sending``, ``fabric:receiving``) whose process is gone (a killed
  replicate) or that names none is WARNING, with the ``zfs release`` command of each.
- ``unknown(name, why)``: a source that could not be read; ``missing_pool``: the pool is not imported (CRITICAL).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from ..base.units import human_bytes

OK, WARNING, CRITICAL, UNKNOWN = "OK", "WARNING", "CRITICAL", "UNKNOWN"
EXIT_CODES = {OK: 0, WARNING: 1, CRITICAL: 2, UNKNOWN: 3}  # the monitoring-plugin convention
_RANK = {OK: 0, UNKNOWN: 1, WARNING: 2, CRITICAL: 3}  # which state wins in ``overall``
DAY = 86400
_LISTED = 5  # devices, hosts or targets named in a one-line summary; the rest are counted ("and 3 more")
_FINE = ("ONLINE", "AVAIL")  # device states that need nobody's attention
_IN_USE = "INUSE"  # a hot spare standing in for a member (the member itself is reported)


@dataclass(frozen=True)
class Thresholds:
    """When a check turns WARNING or CRITICAL (fabricctl's ``health:`` configuration; these are its defaults).

    Scrub ages: Debian's zfsutils-linux scrubs every pool on the second Sunday of each month, at most 35 days
    apart; 40 days warns after one missed scrub (with a margin for a scrub that takes days), 60 after two."""

    capacity_warn_percent: int = 80  # ZFS allocates more slowly and fragments past ~80%
    capacity_critical_percent: int = 90
    scrub_warn_days: int = 40
    scrub_critical_days: int = 60


DEFAULTS = Thresholds()
KEYS = ("capacity_warn_percent", "capacity_critical_percent", "scrub_warn_days", "scrub_critical_days")


@dataclass(frozen=True)
class Check:
    """One check's result: its name, state, one line saying why (naming the device, pool or value), details
    for scripts, and its Nagios performance data (``label=value[UOM];warn;crit;min;max`` items)."""

    name: str
    state: str
    summary: str
    details: dict = field(default_factory=dict)
    perf: tuple = ()

    @property
    def code(self) -> int:
        return EXIT_CODES[self.state]

    def to_dict(self) -> dict:
        return {"name": self.name, "state": self.state, "code": self.code, "summary": self.summary,
                "details": dict(self.details)}


def worst(states) -> str:
    """The state that wins: CRITICAL over WARNING over UNKNOWN over OK (OK when there is none)."""
    return max(states, key=_RANK.__getitem__, default=OK)


def exit_code(checks) -> int:
    """The monitoring-plugin exit status of a list of checks: that of the worst state."""
    return EXIT_CODES[worst(c.state for c in checks)]


def unknown(name: str, why: str) -> Check:
    """A check whose source could not be read: UNKNOWN, saying why."""
    return Check(name, UNKNOWN, why)


def _listing(items: list) -> str:
    shown = ", ".join(items[:_LISTED])
    return shown + (f" and {len(items) - _LISTED} more" if len(items) > _LISTED else "")


def _when(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 2 * DAY:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / DAY:.0f} days"


# --------------------------------------------------------------------------------------------------
# the pool (a zpool.PoolHealth of `zpool status -j --json-int -P POOL`, a row of `zpool list -j --json-int`)


def missing_pool(pool: str) -> Check:
    """The configured pool is not imported on this node: nothing can be exported."""
    return Check("pool_state", CRITICAL, f"pool {pool} is not imported on this node (`zpool import {pool}`)",
                 {"pool": pool, "state": "MISSING"})


def _device(d) -> str:
    """A device as a person finds it: its path (a missing device: the path it had), else zpool's name."""
    return d.path or d.name


def _problem_devices(health) -> list:
    """The devices (and vdevs) that are the reason a pool is not fine: every leaf that is not ONLINE/AVAIL and
    not a spare in use, and every vdev that is lost as a whole (a DEGRADED vdev is explained by its leaves)."""
    out = []
    for d in health.devices:
        if d.depth == 0 or d.state in _FINE or d.state == _IN_USE:
            continue
        if not d.path and d.state == "DEGRADED":  # a vdev node (mirror-0, raidz1-0, spare-2): see its leaves
            continue
        out.append(d)
    return out


def pool_state(health) -> Check:
    """ONLINE: OK; any other pool state: CRITICAL naming the devices that are not ONLINE; an ONLINE pool with a
    device that is not (a cache or spare gone): WARNING."""
    problems = _problem_devices(health)
    named = [f"{_device(d)} {d.state}" + (f" ({d.aux.lower()})" if d.aux else "") for d in problems]
    spares = [_device(d) for d in health.devices if d.state == _IN_USE]
    details = {"pool": health.name, "state": health.state, "status": health.status, "action": health.action,
               "devices": [d.to_dict() for d in problems], "spares_in_use": spares}
    why = f": {_listing(named)}" if named else ""
    spared = f"; spare {_listing(spares)} in use" if spares else ""
    if health.state == "ONLINE":
        if problems:
            return Check("pool_state", WARNING, f"pool {health.name} ONLINE but{why[1:]}{spared}", details)
        return Check("pool_state", OK, f"pool {health.name} ONLINE", details)
    if not health.state:
        return Check("pool_state", UNKNOWN, f"zpool status shows no state for pool {health.name}", details)
    return Check("pool_state", CRITICAL, f"pool {health.name} {health.state}{why}{spared}", details)


def _counts(d) -> str:
    return ", ".join(f"{n} {what}" for n, what in ((d.read, "read"), (d.write, "write"), (d.cksum, "cksum")) if n)


def _kinds(d) -> str:
    kinds = [what for n, what in ((d.read, "read"), (d.write, "write"), (d.cksum, "checksum")) if n]
    return " and ".join(kinds)


def device_errors(health) -> Check:
    """Every node of the vdev tree with a nonzero READ, WRITE or CKSUM counter: WARNING, naming each and its
    counts (the counters stay until `zpool clear`)."""
    bad = [d for d in health.devices if d.read or d.write or d.cksum]
    details = {"pool": health.name, "devices": [{"device": _device(d) if d.depth else f"{health.name} (pool)",
                                                 "read": d.read, "write": d.write, "cksum": d.cksum} for d in bad]}
    perf = (f"devices_with_errors={len(bad)};1;;0",)
    if not bad:
        return Check("device_errors", OK, "no read, write or checksum errors", details, perf)
    each = [f"{_kinds(d)} errors on {_device(d) if d.depth else 'pool ' + health.name}: {_counts(d)}" for d in bad]
    if len(bad) == 1:
        return Check("device_errors", WARNING, each[0], details, perf)
    return Check("device_errors", WARNING, f"{len(bad)} devices with errors: {'; '.join(each[:_LISTED])}"
                 + (f"; and {len(bad) - _LISTED} more" if len(bad) > _LISTED else ""), details, perf)


def data_errors(health) -> Check:
    """Permanent data errors (files ZFS could not repair): CRITICAL."""
    details = {"pool": health.name, "error_count": health.error_count}
    perf = (f"data_errors={health.error_count};;1;0",)
    if health.error_count:
        return Check("data_errors", CRITICAL, f"pool {health.name} has {health.error_count} data errors "
                     f"(files listed by `zpool status -v {health.name}`)", details, perf)
    return Check("data_errors", OK, "no data errors", details, perf)


def _aged(age: float, thresholds: Thresholds) -> str:
    if age >= thresholds.scrub_critical_days * DAY:
        return CRITICAL
    if age >= thresholds.scrub_warn_days * DAY:
        return WARNING
    return OK


def scrub(health, now: float, thresholds: Thresholds = DEFAULTS, created: float | None = None) -> Check:
    """The last scrub against the thresholds, at ``now`` (epoch seconds); ``created``: when the pool was made
    (its root dataset's ``creation``), the age of a pool never scrubbed.

    zpool keeps one scan, the last or current one (scan_stats): a finished scrub is aged from its end; a scrub
    in progress or paused from its start (it has not completed since then); a pool that has no scan from its
    creation. A resilver in progress is WARNING; a finished one is aged from its end (zpool no longer knows the
    scrub before it). A last scan that found errors or repaired data, and a canceled scrub, are WARNING."""
    scan = health.scan_stats or {}
    function, state = scan.get("function", "NONE"), scan.get("state", "NONE")
    limits = f"warning at {thresholds.scrub_warn_days} days, critical at {thresholds.scrub_critical_days}"
    details: dict = {"pool": health.name, "function": function, "state": state, "warn_days": thresholds.scrub_warn_days,
                     "critical_days": thresholds.scrub_critical_days}

    def perf(age):
        return (f"scrub_age={age:.0f}s;{thresholds.scrub_warn_days * DAY};{thresholds.scrub_critical_days * DAY};0",)

    def result(states: list, text: str, age: float | None) -> Check:
        details["age_seconds"] = None if age is None else round(max(0.0, age))
        details["since"] = None if age is None else now - max(0.0, age)  # the time it is aged from (Unix time)
        return Check("scrub", worst(states), text, details, perf(max(0.0, age)) if age is not None else ())

    start, end = scan.get("start_time", 0), scan.get("end_time", 0)
    errors, repaired = scan.get("errors", 0), scan.get("processed", 0)
    details.update(start_time=start or None, end_time=end or None, errors=errors, repaired_bytes=repaired)
    if function == "NONE" or state == "NONE":
        if created is None:
            return result([WARNING], f"pool {health.name} has never been scrubbed (`zpool scrub {health.name}`)",
                          None)
        age = now - created
        return result([_aged(age, thresholds)], f"pool {health.name} never scrubbed, created {_age(age)} ago "
                      f"({limits})", age)
    total = scan.get("to_examine", 0)
    done = f", {100 * scan.get('issued', 0) / total:.0f}% done" if total else ""
    details["percent_done"] = round(100 * scan.get("issued", 0) / total, 1) if total else None
    if state == "SCANNING" and function == "RESILVER":
        return result([WARNING], f"resilver of pool {health.name} in progress since {_when(start)}{done}",
                      now - start)
    if state == "SCANNING":
        age = now - start
        paused = scan.get("scrub_pause", 0)
        how = f"paused since {_when(paused)}" if paused else f"in progress since {_when(start)}{done}"
        aged = _aged(age, thresholds)
        tail = f" (not completed for {_age(age)}; {limits})" if aged != OK else ""
        return result([aged], f"{function.lower()} of pool {health.name} {how}{tail}", age)
    what = function.lower()
    if state == "CANCELED":
        return result([WARNING], f"last {what} of pool {health.name} was canceled on {_when(end or start)}; "
                      "no completed scrub is recorded since", now - (end or start))
    age = now - end
    states = [_aged(age, thresholds)]
    found = []
    if errors:
        found.append(f"found {errors} errors")
        states.append(WARNING)
    if repaired:
        found.append(f"repaired {human_bytes(repaired)}")
        states.append(WARNING)
    text = f"last {what} of pool {health.name} ended {_age(age)} ago ({_when(end)})"
    if found:
        text += f" and {' and '.join(found)}"
    if function != "SCRUB":
        text += "; zpool keeps no record of the scrub before it"
    if states[0] != OK:
        text += f" ({limits})"
    return result(states, text, age)


def capacity(pool: dict, thresholds: Thresholds = DEFAULTS) -> Check:
    """A row of `zpool list` ({name, size, alloc, free, cap}) against the capacity thresholds."""
    cap, name = int(pool.get("cap") or 0), pool.get("name", "")
    warn, crit = thresholds.capacity_warn_percent, thresholds.capacity_critical_percent
    details = {"pool": name, "percent": cap, "size": pool.get("size"), "alloc": pool.get("alloc"),
               "free": pool.get("free"), "warn_percent": warn, "critical_percent": crit}
    perf = (f"capacity={cap}%;{warn};{crit};0;100",)
    used = f"pool {name} {cap}% full ({human_bytes(pool.get('alloc'))} of {human_bytes(pool.get('size'))}"
    if cap >= crit:
        return Check("capacity", CRITICAL, f"{used}; critical at {crit}%)", details, perf)
    if cap >= warn:
        return Check("capacity", WARNING, f"{used}; warning at {warn}%)", details, perf)
    return Check("capacity", OK, f"{used})", details, perf)


def pool_checks(health, pool: dict, now: float, thresholds: Thresholds = DEFAULTS,
                created: float | None = None) -> list:
    """Every check of a pool: state, device errors, data errors, scrub, capacity."""
    return [pool_state(health), device_errors(health), data_errors(health),
            scrub(health, now, thresholds, created), capacity(pool, thresholds)]


# --------------------------------------------------------------------------------------------------
# access and sessions (what fabric_core.services.publish.ExportIndex answers)

NO_CHAP = ("exports have no CHAP (insecure_no_chap: true): any host on the storage network that sets another's "
           "initiator name gets its exports, its writable checkpoint volumes included; only for an isolated lab "
           "(fabric_insecure_no_chap in the inventory)")
OPEN_DISCOVERY = ("SendTargets discovery is open on this node: any host on the storage network can list target "
                  "names; the next publish (or playbooks/site.yml) closes it")


def chap(per_host: bool) -> Check:
    """Exports without CHAP: WARNING."""
    if per_host:
        return Check("chap", OK, "every host logs in with its own CHAP secret", {"chap": "per-host"})
    return Check("chap", WARNING, NO_CHAP, {"chap": "off"})


def discovery(closed: bool) -> Check:
    """SendTargets discovery open: WARNING."""
    if closed:
        return Check("discovery", OK, "SendTargets discovery closed", {"discovery": "closed"})
    return Check("discovery", WARNING, OPEN_DISCOVERY, {"discovery": "open"})


def _short(target: str) -> str:
    return target.split(":", 1)[-1]


def sessions(acls: dict, logged_in: dict, all_acls: int | None = None) -> Check:
    """``acls`` {target IQN: [host names whose ACL is a publish's]}, ``logged_in`` {host name: [target IQNs]}: a
    host published a version and with no session to it is WARNING (asked to attach it, not logged in). A grant's
    ACL is not in ``acls``: its host attaches when a job wants it (``all_acls``: how many ACLs there are in all,
    grants included, for the summary)."""
    missing: dict = {}
    for target, hosts in sorted(acls.items()):
        for host in hosts:
            if target not in logged_in.get(host, []):
                missing.setdefault(host, []).append(target)
    pairs = sum(len(acls[t]) for t in acls)
    total = pairs if all_acls is None else all_acls
    details = {"missing": {h: list(t) for h, t in sorted(missing.items())}, "acls": total, "published": pairs}
    perf = (f"sessions_missing={sum(len(t) for t in missing.values())};1;;0",)
    if not missing:
        grants = f"; {total - pairs} granted, attached when a job asks" if total > pairs else ""
        return Check("sessions", OK, f"every host a version is published to is logged in ({pairs} ACLs{grants})",
                     details, perf)
    named = [f"{h} ({', '.join(_short(t) for t in ts)})" for h, ts in sorted(missing.items())]
    return Check("sessions", WARNING, f"{len(missing)} host{'s' if len(missing) > 1 else ''} not logged in to "
                 f"targets published to them: {_listing(named)}", details, perf)


def paths(found: dict, unreachable: dict) -> Check:
    """``found`` {host: {version ref: {multipath, up, paths}}} (``Publisher.paths``), ``unreachable`` {host: why}:
    a version a host reads over no path is CRITICAL, one with a path down (a multipath map short of a storage
    node) WARNING, a host that could not be asked UNKNOWN."""
    down = {f"{h} {ref}": p for h, refs in sorted(found.items()) for ref, p in sorted(refs.items()) if p["up"] == 0}
    short = {f"{h} {ref}": p for h, refs in sorted(found.items()) for ref, p in sorted(refs.items())
             if 0 < p["up"] < p["paths"]}
    details = {"paths": found, "unreachable": dict(unreachable)}
    count = sum(len(r) for r in found.values())
    perf = (f"paths_down={sum(p['paths'] - p['up'] for r in found.values() for p in r.values())};1;;0",)
    if down:
        return Check("paths", CRITICAL, f"read over no path: {_listing(list(down))}", details, perf)
    if short:
        named = [f"{k} ({p['up']}/{p['paths']} up)" for k, p in short.items()]
        return Check("paths", WARNING, f"paths down: {_listing(named)}", details, perf)
    if unreachable:
        return Check("paths", UNKNOWN, f"could not ask {_listing(sorted(unreachable))}", details, perf)
    return Check("paths", OK, f"every path up ({count} version{'s' if count != 1 else ''} on hosts)", details, perf)


OVERDUE_SECONDS = 10  # a thaw timer this late has not thawed its file system: something is wrong on the writer


def writers(found: dict, unreachable: dict) -> Check:
    """Frozen file systems on checkpoint writers. ``found`` {host: {"jobs": {job: mount point}, "frozen": {mount
    point: {frozen_for, thaw_in}}, "blocked": [{pid, comm}]}} (``freeze.read_writer`` per writer), ``unreachable``
    {host: why}. A checkpoint volume fabricctl holds frozen is WARNING (its writes wait: a snapshot in progress,
    or its fabricctl died and the safety timer thaws it); one whose timer is overdue is CRITICAL; tasks waiting as
    writes to a frozen file system wait, on a writer with nothing frozen by fabricctl, WARNING (frozen by hand,
    or another lock of that kind); a writer that could not be asked UNKNOWN."""
    held, overdue, stray = [], [], []
    for host, state in sorted(found.items()):
        jobs = {m: j for j, m in state.get("jobs", {}).items()}
        for mountpoint, f in sorted(state.get("frozen", {}).items()):
            thaw_in = f.get("thaw_in")
            text = f"{jobs.get(mountpoint, mountpoint)} on {host} ({mountpoint}, frozen {f.get('frozen_for')} s"
            if thaw_in is not None and thaw_in < -OVERDUE_SECONDS:
                overdue.append(f"{text}, its thaw timer {-thaw_in:.0f} s overdue)")
            else:
                held.append(f"{text}, the safety timer thaws it in {thaw_in} s)")
        if state.get("blocked") and not state.get("frozen"):
            tasks = [f"{t['pid']} {t['comm']}" for t in state["blocked"]]
            stray.append(f"{host}: {len(tasks)} task{'s' if len(tasks) != 1 else ''} ({_listing(tasks)})")
    details = {"writers": found, "unreachable": dict(unreachable)}
    perf = (f"writers_frozen={len(held) + len(overdue)};1;;0",)
    if overdue:
        return Check("writers", CRITICAL, "writes on hold past the safety timer: " + "; ".join(overdue)
                     + "; run `fsfreeze -u MOUNTPOINT` on the writer", details, perf)
    if held:
        return Check("writers", WARNING, "checkpoint writes on hold: " + "; ".join(held), details, perf)
    if stray:
        return Check("writers", WARNING, "tasks wait as writes to a frozen file system do, nothing frozen by "
                     "fabricctl: " + "; ".join(stray) + " (a file system frozen by hand? `fsfreeze -u` it)",
                     details, perf)
    if unreachable:
        return Check("writers", UNKNOWN, f"could not ask {_listing(sorted(unreachable))}", details, perf)
    count = sum(len(s.get("jobs", {})) for s in found.values())
    return Check("writers", OK, f"no checkpoint volume frozen ({count} on {len(found)} writer"
                 f"{'s' if len(found) != 1 else ''})", details, perf)


def lio_digest(dump: dict) -> dict[str, set]:
    """What a reboot brings back of an LIO configuration (rtslib's dump: the live one, or the one targetctl
    restores at boot): its targets, each target's LUNs with their backstores, and each ACL. No secrets."""
    out: dict[str, set] = {"targets": set(), "luns": set(), "acls": set()}
    for t in dump.get("targets") or []:
        wwn = t.get("wwn", "")
        out["targets"].add(wwn)
        for tpg in t.get("tpgs") or []:
            for lun in tpg.get("luns") or []:
                backstore = str(lun.get("storage_object", "")).rsplit("/", 1)[-1]
                out["luns"].add(f"{_short(wwn)} LUN {lun.get('index')} ({backstore})")
            for acl in tpg.get("node_acls") or []:
                out["acls"].add(f"{_short(wwn)} ACL {acl.get('node_wwn')}")
    return out


def lio_saved(live: dict, saved: dict | None, path: str) -> Check:
    """LIO as it runs against the configuration it restores at boot (``saved`` None: there is none). A target,
    LUN or ACL that only runs is lost at the next reboot, one that is only saved comes back: WARNING."""
    now = lio_digest(live)
    counts = f"{len(now['targets'])} targets, {len(now['luns'])} LUNs, {len(now['acls'])} ACLs"
    if saved is None:
        if not now["targets"]:
            return Check("lio_saved", OK, f"nothing exported and nothing saved ({path})", {"saved": False})
        return Check("lio_saved", WARNING, f"LIO runs {counts} but {path} does not exist: a reboot loses them "
                     "(`targetctl save` saves LIO as it runs)", {"saved": False})
    then = lio_digest(saved)
    lost = sorted(x for k in now for x in now[k] - then[k] if k != "targets")
    lost += sorted(f"target {_short(t)}" for t in now["targets"] - then["targets"])
    back = sorted(x for k in then for x in then[k] - now[k] if k != "targets")
    back += sorted(f"target {_short(t)}" for t in then["targets"] - now["targets"])
    details = {"saved": True, "lost_at_reboot": lost, "back_at_reboot": back}
    if not lost and not back:
        return Check("lio_saved", OK, f"the saved configuration is LIO as it runs ({counts})", details)
    parts = ([f"a reboot would lose {_listing(lost)}"] if lost else []) + \
        ([f"a reboot would bring back {_listing(back)}"] if back else [])
    return Check("lio_saved", WARNING, "; ".join(parts) + f" ({path} is not LIO as it runs; `targetctl save` "
                 "saves it as it runs, after checking that is what should come back)", details)


ROTATION_WARN_HOURS = 48  # the role's timer rotates daily: two missed days warn


def rotation(last_success: float | None, now: float, source: str) -> Check:
    """The age of the last successful `fabricctl rotate` (its metrics file's timestamp; None: no run recorded,
    as on a new node before the timer's first run). Older than ROTATION_WARN_HOURS: WARNING."""
    if last_success is None:
        return Check("rotation", OK, f"no successful rotation recorded yet ({source})", {"last_success": None})
    age = now - last_success
    details = {"last_success": last_success, "age_seconds": round(age)}
    perf = (f"rotation_age_hours={age / 3600:.1f};{ROTATION_WARN_HOURS};;0",)
    if age > ROTATION_WARN_HOURS * 3600:
        return Check("rotation", WARNING, f"the last successful fabricctl rotate was {_age(age)} ago "
                     f"({_when(last_success)}): see `systemctl status fabricctl-rotate` and "
                     "`journalctl -u fabricctl-rotate`", details, perf)
    return Check("rotation", OK, f"last successful rotation {_age(age)} ago", details, perf)


def foreign_acls(foreign: dict) -> Check:
    """``foreign`` {target IQN: [initiators no configured host has]}: WARNING (a host taken out of the
    configuration keeps its access until `fabricctl access sync`)."""
    foreign = {t: list(i) for t, i in sorted(foreign.items()) if i}
    if not foreign:
        return Check("foreign_acls", OK, "every ACL belongs to a configured host", {"foreign": {}})
    named = [f"{i} on {_short(t)}" for t, inits in foreign.items() for i in inits]
    return Check("foreign_acls", WARNING, f"ACLs of initiators no configured host has: {_listing(named)} "
                 "(`fabricctl access sync` revokes them)", {"foreign": foreign})


def leftover_holds(leftovers: list[dict]) -> Check:
    """``leftovers`` (``holders.Leftover.to_dict``: the replication holds whose holder is gone, or that name none):
    WARNING, naming each snapshot with the command that releases it (they keep it from being destroyed or
    rotated; the next replicate or receive of the volume releases a dead holder's itself)."""
    details = {"leftovers": list(leftovers)}
    perf = (f"leftover_holds={len(leftovers)};1;;0",)
    if not leftovers:
        return Check("holds", OK, "no replication hold left by a process that is gone", details, perf)
    named = []
    for h in leftovers:
        who = f"pid {h['holder']['pid']} gone" if h.get("holder") else "holder not recorded"
        named.append(f"{h['snapshot']} ({who}: `{h['release']}`)")
    return Check("holds", WARNING, f"holds left by a killed replication keep snapshots from being destroyed or "
                 f"rotated: {_listing(named)}; the next replicate of the volume releases those of a process that "
                 "is gone", details, perf)


# SCSI reservations on LIO's backstores (``lio.read_reservations``: configfs core/HBA/NAME/pr/* and
# attrib/emulate_pr as text). What the kernel writes there (target_core_configfs.c): res_holder "No SPC-2
# Reservation holder", "SPC-2 Reservation: iSCSI Initiator: IQN", "No SPC-3 Reservation holder", "SPC-3
# Reservation: iSCSI Initiator: IQN,i,0xISID", or "SPC_RESERVATIONS_DISABLED" (emulate_pr 0);
# res_pr_registered_i_pts "SPC-3 PR Registrations:" then "None" or one "iSCSI Node: IQN,i,0xISID Key: 0xKEY
# PRgen: 0xN" line per registration.
_NOT_HELD = ("", "SPC_RESERVATIONS_DISABLED", "Passthrough")
_HOLDER = re.compile(r"^SPC-(?P<spc>[23]) Reservation: (?P<fabric>\S+) Initiator: (?P<initiator>[^,\s]+)")
_REGISTRATION = re.compile(r"Node: (?P<initiator>[^,\s]+)\S* Key: (?P<key>0x[0-9A-Fa-f]+)")


def parse_reservation(files: dict) -> dict:
    """One backstore's pr/ and emulate_pr readings as {"emulate_pr": 0/1/None, "holder": {"spc", "initiator",
    "text"} or None, "registrations": [{"initiator", "key"}]}."""
    holder_text = " ".join(str(files.get("res_holder", "")).split())
    holder = None
    if holder_text not in _NOT_HELD and not holder_text.startswith("No SPC-"):
        m = _HOLDER.match(holder_text)
        holder = {"spc": int(m["spc"]) if m else None, "initiator": m["initiator"] if m else "", "text": holder_text}
        if holder["spc"] == 3 and files.get("res_pr_type"):  # "SPC-3 Reservation Type: Write Exclusive Access"
            holder["type"] = " ".join(str(files["res_pr_type"]).split()).removeprefix("SPC-3 Reservation Type: ")
    registrations = [{"initiator": m["initiator"], "key": m["key"]}
                     for m in _REGISTRATION.finditer(str(files.get("res_pr_registered_i_pts", "")))]
    value = str(files.get("emulate_pr", "")).strip()
    return {"emulate_pr": int(value) if value.isdigit() else None, "holder": holder, "registrations": registrations}


def _exported(dump: dict) -> dict:
    """{backstore name: set of initiators with an ACL mapping one of its LUNs} of an rtslib dump."""
    out: dict = {}
    for t in dump.get("targets") or []:
        for tpg in t.get("tpgs") or []:
            by_index = {lu.get("index"): str(lu.get("storage_object", "")).rsplit("/", 1)[-1]
                        for lu in tpg.get("luns") or []}
            for name in by_index.values():
                out.setdefault(name, set())
            for acl in tpg.get("node_acls") or []:
                for m in acl.get("mapped_luns") or []:
                    if m.get("tpg_lun") in by_index:
                        out[by_index[m["tpg_lun"]]].add(acl.get("node_wwn", ""))
    return out


def reservations(readings: dict, dump: dict) -> Check:
    """SCSI reservations and registrations on the backstores LIO exports. ``readings`` {backstore: configfs
    files} (``lio.read_reservations``), ``dump`` rtslib's (each backstore's readonly, who its LUNs are mapped to).

    A reservation held on a read-only export stops every other host's reads (RESERVATION CONFLICT): CRITICAL,
    as is one on a writable volume held by another host than its one writer. An SPC-3 registration (on a
    read-only export, or by another host than a volume's writer), and a read-only export that still allows
    reservations (emulate_pr 1: made before the fabric refused them), are WARNING. The writer's own
    reservation or registration on its volume is OK, and named."""
    readonly = {so.get("name"): bool(so.get("readonly")) for so in dump.get("storage_objects") or []}
    exported = _exported(dump)
    held, registered, allowed, writers_own = [], [], [], []
    writer_holds = 0
    details: dict = {}
    for name in sorted(n for n in readings if n in exported):
        r = parse_reservation(readings[name])
        details[name] = {**r, "readonly": readonly.get(name), "mapped_to": sorted(exported[name])}
        ro = readonly.get(name, True)
        h = r["holder"]
        if h:
            text = f"{name} reserved by {h['initiator'] or h['text']} (SPC-{h['spc']}" + \
                (f", {h['type']}" if h.get("type") else "") + ")"
            if not ro and h["initiator"] and exported[name] == {h["initiator"]}:
                writers_own.append(text + ", its writer")
                writer_holds += 1
            else:
                held.append(text)
        if r["registrations"]:
            who = sorted({g["initiator"] for g in r["registrations"]})
            text = (f"{name} has {len(r['registrations'])} SPC-3 registration"
                    f"{'s' if len(r['registrations']) != 1 else ''} ({_listing(who)})")
            if not ro and set(who) == exported[name]:
                writers_own.append(text + ", its writer's")
            else:
                registered.append(text)
        if ro and r["emulate_pr"] == 1:
            allowed.append(name)
    perf = (f"reservations_held={len(held) + writer_holds};;;0",)
    if held:
        return Check("reservations", CRITICAL, f"SCSI reservations stop the other hosts' I/O: {_listing(held)} "
                     "(an SPC-2 one ends when its holder releases it or its session ends; any ends when the export "
                     "is re-created: unpublish and publish it again)", details, perf)
    warn = []
    if registered:
        warn.append(f"SCSI registrations (no writer's): {_listing(registered)}")
    if allowed:
        warn.append(f"read-only exports that allow SCSI reservations (emulate_pr 1), where any host can stop the "
                    f"others' reads: {_listing(allowed)} (re-made refusing them by the next publish or converge "
                    "with none of their hosts logged in; or unpublish and publish again)")
    if warn:
        return Check("reservations", WARNING, "; ".join(warn) + (f"; {_listing(writers_own)}" if writers_own else ""),
                     details, perf)
    text = f"no SCSI reservation on {len(details)} exported LUN{'s' if len(details) != 1 else ''}"
    if writers_own:
        text = f"{_listing(writers_own)}; no other SCSI reservation"
    return Check("reservations", OK, text + "; read-only exports refuse them", details, perf)


# --------------------------------------------------------------------------------------------------
# the result


def overall(checks: list) -> Check:
    """The checks as one: the worst state and a summary of what is not OK, worst first (all OK: the first
    check's summary and how many passed), with every check's performance data."""
    state = worst(c.state for c in checks)
    bad = sorted((c for c in checks if c.state != OK), key=lambda c: -_RANK[c.state])
    if bad:
        text = "; ".join(c.summary for c in bad)
    elif checks:
        text = f"{checks[0].summary}; all {len(checks)} checks OK"
    else:
        text, state = "nothing was checked", UNKNOWN
    perf = tuple(p for c in checks for p in c.perf)
    return Check("fabric", state, text, {"checks": len(checks), "not_ok": [c.name for c in bad]}, perf)


def status_line(checks: list, label: str = "FABRIC") -> str:
    """The monitoring plugin's line: ``FABRIC STATE - summary | perfdata``."""
    total = overall(checks)
    line = f"{label} {total.state} - {' '.join(total.summary.split())}"
    return f"{line} | {' '.join(total.perf)}" if total.perf else line


__all__ = ["CRITICAL", "Check", "DAY", "DEFAULTS", "EXIT_CODES", "KEYS", "NO_CHAP", "OK", "OPEN_DISCOVERY",
           "Thresholds", "UNKNOWN", "WARNING", "capacity", "chap", "data_errors", "device_errors", "discovery",
           "exit_code", "foreign_acls", "leftover_holds", "missing_pool", "overall", "pool_checks", "pool_state",
           "reservations", "scrub", "sessions", "status_line", "unknown", "worst"]
