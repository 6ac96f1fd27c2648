"""Retention's ``calendar: sanoid`` (fabric_core.services.retention) against sanoid itself, and the default calendar
rule stated as what it is (restic's newest-per-period, not sanoid's).

Two kinds of evidence:

- recorded comparisons: snapshot lists, a policy, a clock, and the set sanoid keeps, derived by reading sanoid 2.x's
  ``prune_snapshots`` and ``getsnaps`` (github jimsalterjrs/sanoid, tags v2.1.0 and v2.2.0: the same code there);
- the real sanoid: Debian's ``sanoid`` package script (tests/test-tools.sh extracts it and its two Perl modules into
  the virtualenv; `make unit` and `make test` run that), run with ``--prune-snapshots`` on the same snapshots, its
  ``zfs`` a stand-in on PATH that prints the list as ``zfs get -Hrpt snapshot creation`` does and records each
  ``zfs destroy``, its clock (Perl's ``time``) set to the test's; the one edit to the script is the path of its
  defaults file (Debian's reads /usr/share/sanoid/sanoid.defaults.conf; the copy beside it is read instead). The
  snapshots it destroys must be exactly those the plan destroys, on the recorded cases and on 20 random ones.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import support  # noqa: F401  (puts module_utils on sys.path)

# isort: split
from fabric_core.base.errors import UserError
from fabric_core.services import retention as r

DS = "tank/checkpoints/job1"
NOW_S = 1800000000  # 2027-01-15 08:00:00 UTC
NOW = datetime.fromtimestamp(NOW_S, UTC)
HOUR, DAY = 3600, 86400


def snap(name: str, created: float, **kw) -> r.Snapshot:
    return r.Snapshot(name=f"{DS}@{name}", created=datetime.fromtimestamp(created, UTC), **kw)


def policy(**rules) -> r.Policy:
    return r.parse_policies({"p": rules}, [])["p"]


def kept(p: r.Plan) -> set[str]:
    return {d.snapshot.snapname for d in p.keep}


def destroyed(p: r.Plan) -> set[str]:
    return {d.snapshot.snapname for d in p.destroy}


def case_a() -> list[r.Snapshot]:
    """Ten hourlies an hour apart, five dailies a day apart, a monthly and a fabricctl step snapshot (both 11.6
    days old)."""
    return ([snap(f"autosnap_x{i}_hourly", NOW_S - i * HOUR - 60) for i in range(10)]
            + [snap(f"autosnap_d{i}_daily", NOW_S - i * DAY - 120) for i in range(5)]
            + [snap("autosnap_m_monthly", NOW_S - 999999), snap("step-100", NOW_S - 999999)])


CASE_A = {"calendar": "sanoid", "hourly": 3, "daily": 2, "monthly": 0}


# --- recorded comparisons ---------------------------------------------------------------------------------------


def test_sanoid_keeps_each_type_younger_than_n_periods_and_leaves_other_names():
    """hourly = 3: x0-x2 are younger than 3 h (x3 is 3 h 1 min old); daily = 2: d0, d1 younger than 48 h;
    monthly = 0: every monthly goes; step-100 is no name sanoid prunes."""
    plan = r.plan(case_a(), policy(**CASE_A), NOW)
    assert kept(plan) == {"autosnap_x0_hourly", "autosnap_x1_hourly", "autosnap_x2_hourly", "autosnap_d0_daily",
                          "autosnap_d1_daily", "step-100"}
    why = {d.snapshot.snapname: d for d in plan.decisions}
    assert why["autosnap_x2_hourly"].reasons == ["sanoid hourly = 3: created after 2027-01-15T05:00:00+00:00 "
                                                 "(3 x 1 h before now)"]
    assert "not one of the 3 newest hourly snapshots (#4)" in why["autosnap_x3_hourly"].notes[0]
    assert "sanoid monthly = 0" in why["autosnap_m_monthly"].notes[0]
    assert "kept, as sanoid keeps it" in why["step-100"].reasons[0]


def test_the_default_calendar_keeps_the_newest_per_period_which_is_not_what_sanoid_keeps():
    """The same snapshots and counts without `calendar: sanoid`: restic's rule, names ignored. hourly 3: the
    newest of 07:00 (x0), 06:00 (x1), 05:00 (x2); daily 2: the newest of today (x0) and of yesterday (x8,
    23:59). The dailies, the step snapshot and the monthly are destroyed; sanoid keeps d0, d1 and step-100."""
    plain = {k: v for k, v in CASE_A.items() if k != "calendar"}
    plan = r.plan(case_a(), policy(**plain), NOW)
    assert kept(plan) == {"autosnap_x0_hourly", "autosnap_x1_hourly", "autosnap_x2_hourly", "autosnap_x8_hourly"}
    assert kept(plan) != kept(r.plan(case_a(), policy(**CASE_A), NOW))


def test_a_job_that_stopped_keeps_the_n_newest_of_each_type():
    """Every hourly is 10 days old: none is younger than 3 h, and sanoid still keeps the 3 newest."""
    snaps = [snap(f"autosnap_{i}_hourly", NOW_S - 10 * DAY - i * HOUR) for i in range(5)]
    plan = r.plan(snaps, policy(calendar="sanoid", hourly=3), NOW)
    assert kept(plan) == {"autosnap_0_hourly", "autosnap_1_hourly", "autosnap_2_hourly"}
    assert "one of the 3 newest hourly snapshots (#3; sanoid keeps at least 3)" in \
        {d.snapshot.snapname: d for d in plan.decisions}["autosnap_2_hourly"].reasons[0]


def test_counts_left_out_are_sanoids_defaults_and_the_cutoff_itself_is_kept():
    """`calendar: sanoid` alone is a sanoid section with only autoprune: hourly 48, daily 90, monthly 6. Sixty
    hourlies an hour apart: creation < now - 48 h is pruned, so the one exactly 48 h old stays (49 kept)."""
    snaps = [snap(f"autosnap_{i:02d}_hourly", NOW_S - i * HOUR) for i in range(60)]
    plan = r.plan(snaps, policy(calendar="sanoid"), NOW)
    assert kept(plan) == {f"autosnap_{i:02d}_hourly" for i in range(49)}
    assert "sanoid hourly = 48 (sanoid's default)" in plan.decisions[-1].reasons[0]
    assert policy(calendar="sanoid").sanoid_counts() == {
        "frequently": (0, True), "hourly": (48, True), "daily": (90, True), "weekly": (0, True),
        "monthly": (6, True), "yearly": (0, True)}


def test_frequently_uses_frequent_period_minutes():
    snaps = [snap(f"autosnap_{i:02d}_frequently", NOW_S - i * 300 - 1) for i in range(8)]  # every 5 min
    plan = r.plan(snaps, policy(calendar="sanoid", frequently=4, frequent_period=5), NOW)
    assert kept(plan) == {f"autosnap_{i:02d}_frequently" for i in range(4)}  # 4 x 5 min: 0-3 are younger
    plan = r.plan(snaps, policy(calendar="sanoid", frequently=4), NOW)  # 15 min: all are younger than 60 min
    assert kept(plan) == {s.snapname for s in snaps}


def test_the_clock_is_sanoids_whole_seconds():
    """hourly = 1: a snapshot exactly 1 h old at the whole second is kept (sanoid: creation < time() - 1 h is
    false), even when now has a fraction of a second more."""
    snaps = [snap("autosnap_old_hourly", NOW_S - 5 * HOUR), snap("autosnap_edge_hourly", NOW_S - HOUR),
             snap("autosnap_new_hourly", NOW_S - 60)]
    plan = r.plan(snaps, policy(calendar="sanoid", hourly=1), NOW + timedelta(seconds=0.7))
    assert kept(plan) == {"autosnap_edge_hourly", "autosnap_new_hourly"}


def test_same_second_snapshots_of_a_type_are_ordered_by_name():
    snaps = [snap(f"autosnap_{c}_hourly", NOW_S - 10 * DAY) for c in "cab"]
    assert kept(r.plan(snaps, policy(calendar="sanoid", hourly=1), NOW)) == {"autosnap_c_hourly"}


def test_a_held_snapshot_counts_as_sanoid_counts_it_and_is_kept():
    """hourly = 2 on four old hourlies, the second oldest held: sanoid prunes the two oldest (its `zfs destroy`
    of the held one fails); fabricctl destroys the oldest and keeps the held one, protected."""
    snaps = [snap(f"autosnap_{i}_hourly", NOW_S - 10 * DAY + i * HOUR, held=(i == 1)) for i in range(4)]
    plan = r.plan(snaps, policy(calendar="sanoid", hourly=2), NOW)
    assert destroyed(plan) == {"autosnap_0_hourly"}
    held = {d.snapshot.snapname: d for d in plan.decisions}["autosnap_1_hourly"]
    assert held.keep and held.protected and held.reasons == ["held"]


def test_sanoids_own_snapshots_are_adopted_and_other_foreign_ones_stay_protected():
    """Not created by fabricctl (fabric:managed false): a sanoid name is a candidate in sanoid mode (its pruning
    handed to fabricctl); any other name, or any name in the default mode, is protected."""
    snaps = [snap("autosnap_old_hourly", NOW_S - 10 * DAY, managed=False),
             snap("autosnap_new_hourly", NOW_S - 60, managed=False),
             snap("by-hand", NOW_S - 10 * DAY, managed=False)]
    plan = r.plan(snaps, policy(calendar="sanoid", hourly=1), NOW)
    assert destroyed(plan) == {"autosnap_old_hourly"}
    assert {d.snapshot.snapname: d for d in plan.decisions}["by-hand"].reasons == [
        "not created by fabricctl (no fabric:managed)"]
    assert destroyed(r.plan(snaps, policy(hourly=1), NOW)) == set()


def test_other_rules_decide_for_other_names_and_can_only_keep_more():
    """keep_last 1 beside the sanoid counts: it sees every candidate (the newest is step-3) and decides for the
    step snapshots, which are then no longer kept for not being sanoid's; the counts still decide the hourlies."""
    snaps = [snap("step-1", NOW_S - 3 * DAY), snap("step-2", NOW_S - 2 * DAY - 10), snap("step-3", NOW_S - 30),
             snap("autosnap_a_hourly", NOW_S - 2 * DAY), snap("autosnap_b_hourly", NOW_S - 60)]
    plan = r.plan(snaps, policy(calendar="sanoid", hourly=1, keep_last=1), NOW)
    assert kept(plan) == {"step-3", "autosnap_b_hourly"}
    plan = r.plan(snaps, policy(calendar="sanoid", hourly=1, keep_last=3), NOW)
    assert kept(plan) == {"step-3", "autosnap_b_hourly", "autosnap_a_hourly"}  # a: by keep_last, not sanoid


@pytest.mark.parametrize(("name", "kind"), [
    ("autosnap_2026-11-20_10:00:00_hourly", "hourly"),
    ("autosnap_2026-11-20_00:00:00_daily", "daily"),
    ("autosnap_2026-11-20_10:15:00_frequently", "frequently"),
    ("autosnap_x_hourly_daily", "daily"),
    ("autosnap_hourly-daily", "hourly"),   # sanoid's .*_(\w*ly) is not anchored at the end
    ("autosnap-hourly", None),             # no '_' before the type
    ("autosnap_x_early", None),            # a type sanoid does not prune
    ("manual_hourly", None),               # not autosnap*
    ("autosnap_x_hourly-bak", None),       # does not end in "ly"
    ("step-100", None),
])
def test_the_type_is_the_one_sanoid_reads_from_the_name(name, kind):
    assert r.sanoid_type(name) == kind


@pytest.mark.parametrize(("rules", "fragment"), [
    ({"calendar": "sanoids", "hourly": 1}, "unknown calendar 'sanoids'; did you mean 'sanoid'"),
    ({"hourly": 1, "frequently": 4}, "frequently is a count of sanoid's and needs `calendar: sanoid`"),
    ({"hourly": 1, "frequent_period": 5}, "frequent_period is a count of sanoid's"),
    ({"calendar": "sanoid", "timezone": "Europe/Berlin"}, "timezone has no effect with `calendar: sanoid`"),
    ({"calendar": "sanoid", "frequent_period": 0}, "frequent_period is too small (0)"),
    ({"calendar": "sanoid", "hourly": -1}, "hourly is negative"),
])
def test_sanoid_mode_configuration_errors(rules, fragment):
    with pytest.raises(UserError, match=None) as err:
        r.parse_policies({"p": rules}, [])
    assert fragment in str(err.value), str(err.value)


def test_a_sanoid_policy_with_every_count_zero_is_allowed_it_keeps_other_names():
    p = policy(calendar="sanoid", frequently=0, hourly=0, daily=0, weekly=0, monthly=0, yearly=0)
    plan = r.plan([snap("step-1", NOW_S - DAY), snap("autosnap_a_daily", NOW_S - 60)], p, NOW)
    assert kept(plan) == {"step-1"}  # sanoid: daily = 0 prunes every daily older than now


def test_explain_text_says_sanoid():
    lines = {line.split()[1]: line.split(None, 2) for line in
             r.explain_text(r.plan(case_a(), policy(**CASE_A), NOW)).splitlines()[:-1]}
    assert lines[f"{DS}@autosnap_d1_daily"][0] == "KEEP"
    assert lines[f"{DS}@autosnap_d1_daily"][2].startswith("sanoid daily = 2: created after 2027-01-13T08:00:00")
    assert lines[f"{DS}@autosnap_d2_daily"][0] == "DESTROY"
    assert lines[f"{DS}@autosnap_d2_daily"][2].startswith("matched no rule of policy p: sanoid daily = 2: created "
                                                          "before 2027-01-13T08:00:00")


# --- the real sanoid ------------------------------------------------------------------------------------------

SHARE = Path(sys.executable).parent.parent / "share"
SANOID = SHARE / "sanoid" / "sanoid"


def _need_sanoid() -> None:
    if SANOID.is_file() and (SHARE / "perl5" / "Config" / "IniFiles.pm").is_file() and shutil.which("perl"):
        return
    why = (f"Debian's sanoid is not in {SANOID.parent} (or perl is missing): run `make test-tools` "
           "(tests/test-tools.sh, which `make unit` and `make test` run)")
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


def real_sanoid(tmp: Path, snaps: list[r.Snapshot], rules: dict, now: int) -> set[str]:
    """The snapshot names Debian's sanoid destroys with `--prune-snapshots` on ``snaps`` under a section of DS
    with ``rules`` (sanoid.conf keys) at ``now`` (whole seconds)."""
    _need_sanoid()
    conf, stub = tmp / "conf", tmp / "bin"
    for d in (conf, stub, tmp / "cache", tmp / "run"):
        d.mkdir()
    shutil.copy(SANOID.parent / "sanoid.defaults.conf", conf)
    script = SANOID.read_text()
    script = script.replace('"/usr/share/sanoid/sanoid.defaults.conf"', f'"{conf}/sanoid.defaults.conf"')
    (tmp / "sanoid").write_text(script)
    body = "".join(f"\t{k} = {v}\n" for k, v in rules.items())
    (conf / "sanoid.conf").write_text(f"[{DS}]\n\tautosnap = no\n\tautoprune = yes\n{body}")
    (tmp / "list").write_text("".join(f"{s.name}\tcreation\t{int(s.created.timestamp())}\t-\n" for s in snaps))
    (stub / "zfs").write_text(f'#!/bin/sh\ncase "$1" in\nget) cat {tmp}/list ;;\n'
                              f'destroy) echo "$2" >> {tmp}/destroyed ;;\n*) echo "zfs $*" >&2; exit 1 ;;\nesac\n')
    (stub / "zfs").chmod(0o755)
    clock = "BEGIN { my $t = shift @ARGV; *CORE::GLOBAL::time = sub () { $t } } my $s = shift @ARGV; $0 = $s; " \
            "do $s; die $@ if $@"
    proc = subprocess.run(["perl", "-I", str(SHARE / "perl5"), "-e", clock, str(now), str(tmp / "sanoid"),
                           "--configdir", str(conf), "--cache-dir", str(tmp / "cache"), "--run-dir", str(tmp / "run"),
                           "--prune-snapshots", "--force-update"],
                          env={**os.environ, "PATH": f"{stub}:{os.environ['PATH']}"}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp / "destroyed"
    return {line.partition("@")[2] for line in out.read_text().splitlines()} if out.exists() else set()


def _sanoid_conf(rules: dict) -> dict:
    return {k: v for k, v in rules.items() if k != "calendar"}


@pytest.mark.parametrize(("snaps", "rules"), [
    (case_a, CASE_A),
    (lambda: [snap(f"autosnap_{i}_hourly", NOW_S - 10 * DAY - i * HOUR) for i in range(5)],
     {"calendar": "sanoid", "hourly": 3}),
    (lambda: [snap(f"autosnap_{i:02d}_hourly", NOW_S - i * HOUR) for i in range(60)], {"calendar": "sanoid"}),
    (lambda: [snap(f"autosnap_{i:02d}_frequently", NOW_S - i * 300 - 1) for i in range(8)],
     {"calendar": "sanoid", "frequently": 4, "frequent_period": 5}),
], ids=["types-and-other-names", "stopped-job", "defaults-and-cutoff", "frequently"])
def test_the_recorded_cases_are_what_the_real_sanoid_does(tmp_path, snaps, rules):
    snaps = snaps()
    expected = destroyed(r.plan(snaps, policy(**rules), NOW))
    assert real_sanoid(tmp_path, snaps, _sanoid_conf(rules), NOW_S) == expected


NAMES = ("autosnap_{}_frequently", "autosnap_{}_hourly", "autosnap_{}_daily", "autosnap_{}_weekly",
         "autosnap_{}_monthly", "autosnap_{}_yearly", "step-{}", "autosnap_{}_early", "manual_{}_hourly",
         "autosnap_{}_hourly_daily")


def random_case(rng: random.Random) -> tuple[list[r.Snapshot], dict]:
    """Up to 60 snapshots over the last two days, two months or three years (distinct seconds: sanoid's order of
    equal ones is Perl's hash order), names of every kind, and random counts (some left out: sanoid's defaults)
    and frequent_period."""
    span = rng.choice((2 * DAY, 60 * DAY, 3 * 365 * DAY))
    times = rng.sample(range(NOW_S - span, NOW_S), rng.randint(1, 60))
    snaps = [snap(rng.choice(NAMES).format(i), t) for i, t in enumerate(times)]
    rules: dict = {"calendar": "sanoid"}
    for kind in r.SANOID_TYPES:
        if rng.random() < 0.8:
            rules[kind] = rng.choice((0, 1, 2, 3, 5, 8, 13, 40))
    if rng.random() < 0.5:
        rules["frequent_period"] = rng.choice((1, 5, 15, 60))
    return snaps, rules


def test_twenty_random_cases_destroy_exactly_what_the_real_sanoid_destroys(tmp_path):
    """About 0.6 s a run of sanoid on this machine: 20 cases."""
    _need_sanoid()
    rng = random.Random(32)
    for n in range(20):
        snaps, rules = random_case(rng)
        now = NOW + timedelta(seconds=rng.random())  # sanoid's clock is the whole second
        expected = destroyed(r.plan(snaps, policy(**rules), now))
        here = tmp_path / f"case{n}"
        here.mkdir()
        assert real_sanoid(here, snaps, _sanoid_conf(rules), NOW_S) == expected, (n, rules)
