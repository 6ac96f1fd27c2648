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

Modules: ``policies`` (the data and the configuration) and ``planner`` (the snapshots read, the plan, its
explanation).
"""

from .planner import batches, combine, explain_text, plan, sanoid_type, snapshot_from_properties
from .policies import (
    ASSIGN_ROOTS,
    BEST_KEYS,
    BEST_MODES,
    BUCKETS,
    CALENDARS,
    NEWEST_PER_PERIOD,
    POLICY_KEYS,
    RETENTION_KEYS,
    SANOID,
    SANOID_DEFAULTS,
    SANOID_FREQUENT_PERIOD,
    SANOID_PERIODS,
    SANOID_TYPES,
    Decision,
    KeepBest,
    Plan,
    Policy,
    Retention,
    Snapshot,
    parse_assign,
    parse_policies,
    parse_retention,
    resolve_assignment,
)

__all__ = [
    "ASSIGN_ROOTS", "BEST_KEYS", "BEST_MODES", "BUCKETS", "CALENDARS", "NEWEST_PER_PERIOD", "POLICY_KEYS",
    "RETENTION_KEYS", "SANOID", "SANOID_DEFAULTS", "SANOID_FREQUENT_PERIOD", "SANOID_PERIODS", "SANOID_TYPES",
    "Decision", "KeepBest", "Plan", "Policy", "Retention", "Snapshot", "batches", "combine", "explain_text",
    "parse_assign", "parse_policies", "parse_retention", "plan", "resolve_assignment", "sanoid_type",
    "snapshot_from_properties",
]
