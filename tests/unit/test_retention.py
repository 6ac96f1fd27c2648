"""Retention planner of fabric_core.services.retention: rules, calendar buckets (leap days, DST, year end),
ties and missing metrics, protection, configuration errors. Fixed clocks and snapshot lists only."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import support  # noqa: F401  (puts module_utils on sys.path)

# isort: split
from fabric_core.base.errors import UserError
from fabric_core.services import retention as r

DS = "tank/checkpoints/job1"
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def snap(name: str, created: datetime, dataset: str = DS, **kw) -> r.Snapshot:
    return r.Snapshot(name=f"{dataset}@{name}", created=created, **kw)


def decisions(p: r.Plan) -> dict[str, r.Decision]:
    return {d.snapshot.snapname if d.snapshot.dataset == DS else d.snapshot.name: d for d in p.decisions}


def kept(p: r.Plan) -> list[str]:
    return [d.snapshot.snapname for d in p.keep]


def hourly_series(start: datetime, count: int, step: timedelta = timedelta(hours=1), **kw) -> list[r.Snapshot]:
    return [snap(f"s{i:04d}", start + i * step, **kw) for i in range(count)]


# --- keep_last / keep_every -----------------------------------------------------------------------

def test_keep_last_keeps_the_newest_n_and_numbers_them_from_the_newest():
    snaps = [snap(c, utc(2026, 11, 20, i)) for i, c in enumerate("abcdefgh")]
    p = r.plan(snaps, r.Policy("p", keep_last=3), NOW)
    assert kept(p) == ["f", "g", "h"]
    d = decisions(p)
    assert d["h"].reasons == ["last 3 (#1)"]
    assert d["f"].reasons == ["last 3 (#3)"]
    assert d["e"].keep is False
    assert d["e"].reasons == ["matched no rule of policy p"]
    assert "not among the last 3 (#4)" in d["e"].notes


def test_keep_last_orders_equal_creation_times_by_name():
    t = utc(2026, 11, 20, 12)
    snaps = [snap("c", t), snap("a", t), snap("b", t)]
    p = r.plan(snaps, r.Policy("p", keep_last=2), NOW)
    assert [d.snapshot.snapname for d in p.decisions] == ["a", "b", "c"]
    assert kept(p) == ["b", "c"]


def test_keep_every_keeps_multiples_of_k_including_step_zero():
    snaps = [snap(f"step-{s}", utc(2026, 11, 1) + timedelta(hours=i), step=s)
             for i, s in enumerate(range(0, 3001, 500))]
    snaps.append(snap("nostep", utc(2026, 11, 2)))
    p = r.plan(snaps, r.Policy("p", keep_every=1000), NOW)
    assert kept(p) == ["step-0", "step-1000", "step-2000", "step-3000"]
    d = decisions(p)
    assert d["step-3000"].reasons == ["every 1000th step (step 3000)"]
    assert "step 1500 is not a multiple of 1000" in d["step-1500"].notes
    assert d["nostep"].keep is False
    assert any("no step" in n for n in d["nostep"].notes)


def test_rules_are_independent_and_every_reason_is_listed():
    snaps = [snap(f"step-{s}", utc(2026, 11, 1) + timedelta(days=i), step=s, metrics={"loss": 1.0 / (i + 1)})
             for i, s in enumerate(range(500, 5001, 500))]
    policy = r.Policy("p", keep_last=2, keep_every=1000, daily=1, keep_best=(r.KeepBest("loss", "min", 1),))
    d = decisions(r.plan(snaps, policy, NOW))
    assert d["step-5000"].reasons == ["last 2 (#1)", "every 1000th step (step 5000)", "daily 2026-11-10 (#1 of 1)",
                                      "best 1 by loss min (#1, 0.1)"]
    assert d["step-4500"].reasons == ["last 2 (#2)"]
    assert d["step-4000"].reasons == ["every 1000th step (step 4000)"]
    assert d["step-3500"].keep is False


# --- calendar buckets -------------------------------------------------------------------------------

def test_daily_keeps_the_newest_snapshot_of_each_of_the_n_newest_days():
    # the docstring's example: every 6 hours from Mon 2026-11-16 00:00 to Wed 2026-11-18 18:00
    snaps = hourly_series(utc(2026, 11, 16), 12, timedelta(hours=6))
    p = r.plan(snaps, r.Policy("p", daily=2), NOW)
    assert [d.snapshot.created for d in p.keep] == [utc(2026, 11, 17, 18), utc(2026, 11, 18, 18)]
    d = decisions(p)
    assert d["s0011"].reasons == ["daily 2026-11-18 (#1 of 2)"]
    assert d["s0007"].reasons == ["daily 2026-11-17 (#2 of 2)"]
    assert "daily 2026-11-18: a newer snapshot keeps this period" in d["s0010"].notes
    assert "daily 2026-11-16: older than the 2 newest periods" in d["s0003"].notes


def test_days_without_snapshots_do_not_count():
    snaps = [snap("d1", utc(2026, 11, 1, 10)), snap("d5", utc(2026, 11, 5, 10)), snap("d9", utc(2026, 11, 9, 10))]
    p = r.plan(snaps, r.Policy("p", daily=2), utc(2026, 12, 31))
    assert kept(p) == ["d5", "d9"]       # two days that have snapshots, however long ago


def test_hourly_keeps_the_newest_per_hour():
    snaps = hourly_series(utc(2026, 11, 20, 8), 12, timedelta(minutes=20))     # 08:00 .. 11:40
    p = r.plan(snaps, r.Policy("p", hourly=3), NOW)
    assert [d.snapshot.created for d in p.keep] == [utc(2026, 11, 20, 9, 40), utc(2026, 11, 20, 10, 40),
                                                    utc(2026, 11, 20, 11, 40)]
    assert decisions(p)["s0011"].reasons == ["hourly 2026-11-20 11:00+00:00 (#1 of 3)"]


def test_weekly_iso_week_straddling_the_new_year_is_one_bucket():
    snaps = hourly_series(utc(2026, 12, 20, 12), 22, timedelta(days=1))    # Sun 2026-12-20 .. Sun 2027-01-10
    p = r.plan(snaps, r.Policy("p", weekly=4), NOW)
    d = {x.snapshot.created.date().isoformat(): x for x in p.decisions}
    assert [x.snapshot.created.date().isoformat() for x in p.keep] == \
        ["2026-12-20", "2026-12-27", "2027-01-03", "2027-01-10"]
    assert d["2027-01-03"].reasons == ["weekly 2026-W53 (#2 of 4)"]      # Mon 12-28 .. Sun 01-03
    assert d["2027-01-10"].reasons == ["weekly 2027-W01 (#1 of 4)"]
    assert d["2026-12-20"].reasons == ["weekly 2026-W51 (#4 of 4)"]
    assert d["2026-12-31"].keep is False and d["2027-01-01"].keep is False
    assert "weekly 2026-W53: a newer snapshot keeps this period" in d["2027-01-01"].notes


def test_monthly_and_yearly_split_at_the_year_end():
    snaps = [snap("nov", utc(2026, 11, 30, 12)), snap("dec30", utc(2026, 12, 30, 12)),
             snap("dec31", utc(2026, 12, 31, 23, 59)), snap("jan1", utc(2027, 1, 1, 0, 1)),
             snap("jan2", utc(2027, 1, 2))]
    d = decisions(r.plan(snaps, r.Policy("p", monthly=2, yearly=5), NOW))
    assert d["jan2"].reasons == ["monthly 2027-01 (#1 of 2)", "yearly 2027 (#1 of 5)"]
    assert d["dec31"].reasons == ["monthly 2026-12 (#2 of 2)", "yearly 2026 (#2 of 5)"]
    assert d["nov"].keep is False and d["dec30"].keep is False and d["jan1"].keep is False


def test_leap_day_is_a_daily_bucket_of_its_own_and_ends_february():
    snaps = [snap("0227", utc(2028, 2, 27, 12)), snap("0228", utc(2028, 2, 28, 12)),
             snap("0229a", utc(2028, 2, 29, 1)), snap("0229b", utc(2028, 2, 29, 23)),
             snap("0301", utc(2028, 3, 1, 0, 30)), snap("0302", utc(2028, 3, 2, 12))]
    d = decisions(r.plan(snaps, r.Policy("p", daily=10, monthly=3), NOW))
    assert d["0229b"].reasons == ["daily 2028-02-29 (#3 of 10)", "monthly 2028-02 (#2 of 3)"]
    assert d["0229a"].keep is False
    assert "daily 2028-02-29: a newer snapshot keeps this period" in d["0229a"].notes
    assert d["0301"].reasons == ["daily 2028-03-01 (#2 of 10)"]
    assert d["0228"].reasons == ["daily 2028-02-28 (#4 of 10)"]
    assert d["0302"].reasons == ["daily 2028-03-02 (#1 of 10)", "monthly 2028-03 (#1 of 3)"]


def test_leap_day_in_local_time_follows_the_policy_timezone():
    # 2028-02-29T23:30Z is already 2028-03-01 00:30 in Berlin
    snaps = [snap("a", utc(2028, 2, 29, 12)), snap("b", utc(2028, 2, 29, 23, 30))]
    in_utc = decisions(r.plan(snaps, r.Policy("p", daily=5), NOW))
    in_berlin = decisions(r.plan(snaps, r.Policy("p", daily=5, timezone="Europe/Berlin"), NOW))
    assert in_utc["a"].keep is False and in_utc["b"].reasons == ["daily 2028-02-29 (#1 of 5)"]
    assert in_berlin["a"].reasons == ["daily 2028-02-29 (#2 of 5)"]
    assert in_berlin["b"].reasons == ["daily 2028-03-01 (#1 of 5)"]


# DST transitions of 2026: (zone, UTC instant of the change, local hour label that is skipped or repeated)
SPRING = [("Europe/Berlin", utc(2026, 3, 29, 1)), ("America/New_York", utc(2026, 3, 8, 7))]
FALL = [("Europe/Berlin", utc(2026, 10, 25, 1)), ("America/New_York", utc(2026, 11, 1, 6))]


@pytest.mark.parametrize("zone, change", SPRING + FALL)
def test_hourly_buckets_across_dst_are_one_per_real_hour(zone, change):
    # a snapshot every 15 minutes for 6 real hours around the change: exactly 6 hourly buckets
    snaps = hourly_series(change - timedelta(hours=3), 24, timedelta(minutes=15))
    p = r.plan(snaps, r.Policy("p", hourly=1000, timezone=zone), NOW)
    assert len(p.keep) == 6
    labels = [x.reasons[0].rsplit(" (#", 1)[0] for x in p.keep]
    assert len(set(labels)) == 6
    # the newest of every real hour is the one kept
    assert [x.snapshot.created for x in p.keep] == [change - timedelta(hours=3) + timedelta(minutes=45 + 60 * i)
                                                    for i in range(6)]


def test_berlin_spring_forward_has_no_bucket_for_the_skipped_hour():
    snaps = hourly_series(utc(2026, 3, 28, 22, 30), 7)       # local 23:30 CET .. 06:30 CEST
    p = r.plan(snaps, r.Policy("p", hourly=24, timezone="Europe/Berlin"), NOW)
    labels = [x.reasons[0].rsplit(" (#", 1)[0] for x in p.keep]
    assert labels == ["hourly 2026-03-28 23:00+01:00", "hourly 2026-03-29 00:00+01:00",
                      "hourly 2026-03-29 01:00+01:00", "hourly 2026-03-29 03:00+02:00",
                      "hourly 2026-03-29 04:00+02:00", "hourly 2026-03-29 05:00+02:00",
                      "hourly 2026-03-29 06:00+02:00"]


def test_new_york_fall_back_repeated_hour_is_two_buckets_told_apart_by_offset():
    snaps = hourly_series(utc(2026, 11, 1, 4, 10), 4)        # local 00:10 EDT, 01:10 EDT, 01:10 EST, 02:10 EST
    p = r.plan(snaps, r.Policy("p", hourly=24, timezone="America/New_York"), NOW)
    assert [x.reasons[0] for x in p.decisions] == ["hourly 2026-11-01 00:00-04:00 (#4 of 24)",
                                                   "hourly 2026-11-01 01:00-04:00 (#3 of 24)",
                                                   "hourly 2026-11-01 01:00-05:00 (#2 of 24)",
                                                   "hourly 2026-11-01 02:00-05:00 (#1 of 24)"]
    # with hourly: 2 the older of the two 01:xx hours is the one dropped
    p2 = r.plan(snaps, r.Policy("p", hourly=2, timezone="America/New_York"), NOW)
    assert kept(p2) == ["s0002", "s0003"]


@pytest.mark.parametrize("zone, change", FALL)
def test_a_25_hour_fall_back_day_is_one_daily_bucket(zone, change):
    tz = ZoneInfo(zone)
    day = change.astimezone(tz).date()
    start = datetime(day.year, day.month, day.day, tzinfo=tz).astimezone(UTC)
    snaps = hourly_series(start, 25)                           # all 25 real hours of that local day
    assert {s.created.astimezone(tz).date() for s in snaps} == {day}
    p = r.plan(snaps, r.Policy("p", daily=7, timezone=zone), NOW)
    assert kept(p) == ["s0024"]
    assert p.keep[0].reasons == [f"daily {day.isoformat()} (#1 of 7)"]


@pytest.mark.parametrize("zone, change", SPRING + FALL)
def test_daily_buckets_across_dst_neither_lost_nor_duplicated(zone, change):
    tz = ZoneInfo(zone)
    first = (change - timedelta(days=3)).astimezone(tz).date()
    # one snapshot at local 00:30 and one at local 23:30 on 7 consecutive local days
    snaps = []
    for i in range(7):
        day = first + timedelta(days=i)
        for hh, mm in ((0, 30), (23, 30)):
            local = datetime(day.year, day.month, day.day, hh, mm, tzinfo=tz)
            snaps.append(snap(f"{day.isoformat()}-{hh:02d}", local.astimezone(UTC)))
    p = r.plan(snaps, r.Policy("p", daily=100, timezone=zone), NOW)
    assert kept(p) == [f"{(first + timedelta(days=i)).isoformat()}-23" for i in range(7)]


# --- keep_best ----------------------------------------------------------------------------------------

def test_keep_best_min_and_max():
    values = [0.5, 0.2, 0.9, 0.1, 0.7]
    snaps = [snap(f"s{i}", utc(2026, 11, 1, i), metrics={"loss": v, "accuracy": 1 - v}) for i, v in enumerate(values)]
    low = r.plan(snaps, r.Policy("p", keep_best=(r.KeepBest("loss", "min", 2),)), NOW)
    assert kept(low) == ["s1", "s3"]
    assert decisions(low)["s3"].reasons == ["best 2 by loss min (#1, 0.1)"]
    assert "loss 0.5 ranks #3, outside best 2 by loss min" in decisions(low)["s0"].notes
    high = r.plan(snaps, r.Policy("p", keep_best=(r.KeepBest("accuracy", "max", 2),)), NOW)
    assert kept(high) == ["s1", "s3"]
    assert decisions(high)["s3"].reasons == ["best 2 by accuracy max (#1, 0.9)"]
    worst = r.plan(snaps, r.Policy("p", keep_best=(r.KeepBest("loss", "max", 1),)), NOW)
    assert kept(worst) == ["s2"]


def test_keep_best_equal_metrics_newer_wins_and_says_so():
    snaps = [snap("old", utc(2026, 11, 1), metrics={"loss": 0.3}),
             snap("mid", utc(2026, 11, 2), metrics={"loss": 0.1}),
             snap("new", utc(2026, 11, 3), metrics={"loss": 0.3})]
    p = r.plan(snaps, r.Policy("p", keep_best=(r.KeepBest("loss", "min", 2),)), NOW)
    assert kept(p) == ["mid", "new"]
    d = decisions(p)
    assert d["new"].reasons == ["best 2 by loss min (#2, 0.3; tied with 1 other(s), newer ranks first)"]
    assert "loss 0.3 ranks #3, outside best 2 by loss min; tied with 1 other(s), newer ranks first" in d["old"].notes
    # input order does not matter
    assert kept(r.plan(list(reversed(snaps)), r.Policy("p", keep_best=(r.KeepBest("loss", "min", 2),)), NOW)) == \
        ["mid", "new"]


def test_keep_best_ties_at_the_same_creation_time_are_decided_by_name():
    t = utc(2026, 11, 1)
    snaps = [snap("b", t, metrics={"loss": 0.5}), snap("a", t, metrics={"loss": 0.5})]
    p = r.plan(snaps, r.Policy("p", keep_best=(r.KeepBest("loss", "min", 1),)), NOW)
    assert kept(p) == ["b"]       # "b" is after "a" in (created, name) order: the newer


def test_missing_and_nan_metrics_take_no_part_in_keep_best_but_other_rules_still_apply():
    snaps = [snap("a", utc(2026, 11, 1), metrics={"loss": 0.9}),
             snap("b", utc(2026, 11, 2), metrics={"loss": 0.5}),
             snap("c", utc(2026, 11, 3), metrics={"accuracy": 0.99}),
             snap("d", utc(2026, 11, 4), metrics={"loss": float("nan")}),
             snap("e", utc(2026, 11, 5))]
    p = r.plan(snaps, r.Policy("p", keep_last=1, keep_best=(r.KeepBest("loss", "min", 2),)), NOW)
    d = decisions(p)
    assert kept(p) == ["a", "b", "e"]       # only a and b have a loss: both in the best 2
    assert d["c"].keep is False
    assert "metric loss missing: not ranked by best 2 by loss min" in d["c"].notes
    assert "metric loss is NaN: not ranked by best 2 by loss min" in d["d"].notes
    assert d["e"].reasons == ["last 1 (#1)"]
    assert "metric loss missing: not ranked by best 2 by loss min" in d["e"].notes


def test_several_keep_best_rules():
    snaps = [snap("a", utc(2026, 11, 1), metrics={"loss": 0.1, "accuracy": 0.5}),
             snap("b", utc(2026, 11, 2), metrics={"loss": 0.4, "accuracy": 0.9}),
             snap("c", utc(2026, 11, 3), metrics={"loss": 0.3, "accuracy": 0.6})]
    policy = r.Policy("p", keep_best=(r.KeepBest("loss", "min", 1), r.KeepBest("accuracy", "max", 1)))
    p = r.plan(snaps, policy, NOW)
    assert kept(p) == ["a", "b"]
    assert decisions(p)["b"].reasons == ["best 1 by accuracy max (#1, 0.9)"]


# --- protection ---------------------------------------------------------------------------------------

def test_protected_snapshots_are_kept_even_when_no_rule_keeps_them():
    snaps = [snap("held", utc(2026, 1, 1), held=True),
             snap("pub", utc(2026, 1, 2), published=True),
             snap("pinned", utc(2026, 1, 3), tags=frozenset({"release", "x"})),
             snap("tagged", utc(2026, 1, 4), tags=frozenset({"x"})),
             snap("manual", utc(2026, 1, 5), managed=False),
             snap("all", utc(2026, 1, 6), held=True, published=True, tags=frozenset({"release"})),
             snap("old", utc(2026, 1, 7)),
             snap("newest", utc(2026, 1, 8))]
    p = r.plan(snaps, r.Policy("p", keep_last=1, pin_tags=frozenset({"release"})), NOW)
    d = decisions(p)
    assert d["held"].reasons == ["held"] and d["held"].protected
    assert d["pub"].reasons == ["published"]
    assert d["pinned"].reasons == ["pinned by tag release"]
    assert d["manual"].reasons == ["not created by fabricctl (no fabric:managed)"]
    assert d["all"].reasons == ["held", "published", "pinned by tag release"]
    assert d["newest"].reasons == ["last 1 (#1)"] and not d["newest"].protected
    assert [x.snapshot.snapname for x in p.destroy] == ["tagged", "old"]   # tag x is not a pin tag


def test_a_dataset_version_a_tag_names_is_never_destroyed_and_the_explanation_names_the_tag():
    snaps = [snap("v1", utc(2026, 1, 1), named_by=frozenset({"prod", "stable"})),
             snap("v2", utc(2026, 1, 2)),
             snap("v3", utc(2026, 1, 3))]
    p = r.plan(snaps, r.Policy("p", keep_last=1), NOW)
    d = decisions(p)
    assert d["v1"].protected and d["v1"].keep
    assert d["v1"].reasons == [f"tagged {t} (a dataset version a tag names: `fabricctl untag` or move the tag to let "
                               "it go)" for t in ("prod", "stable")]
    assert [x.snapshot.snapname for x in p.destroy] == ["v2"]
    props = {"creation": "1767225600", "fabric:managed": "true"}
    assert r.snapshot_from_properties(f"{DS}@v1", props, named_by=["prod"]).named_by == frozenset({"prod"})


def test_protected_managed_snapshots_count_in_the_rules_but_unmanaged_do_not():
    snaps = [snap("a", utc(2026, 1, 1)), snap("b", utc(2026, 1, 2)),
             snap("pub", utc(2026, 1, 3), published=True), snap("manual", utc(2026, 1, 4), managed=False)]
    d = decisions(r.plan(snaps, r.Policy("p", keep_last=2), NOW))
    assert d["pub"].reasons == ["published", "last 2 (#1)"]
    assert d["b"].reasons == ["last 2 (#2)"]            # the unmanaged one took no slot
    assert d["manual"].reasons == ["not created by fabricctl (no fabric:managed)"]
    assert d["a"].keep is False


def test_snapshots_from_the_future_are_kept_and_take_no_slot():
    now = utc(2026, 11, 20, 12)
    snaps = [snap("a", utc(2026, 11, 20, 10)), snap("b", utc(2026, 11, 20, 11)),
             snap("skewed", utc(2026, 11, 20, 12, 5)), snap("exact", now)]
    d = decisions(r.plan(snaps, r.Policy("p", keep_last=1), now))
    assert d["skewed"].keep and d["skewed"].protected
    assert d["skewed"].reasons[0].startswith("created in the future (2026-11-20T12:05:00+00:00 is after now")
    assert d["exact"].reasons == ["last 1 (#1)"]      # created == now is not the future
    assert d["a"].keep is False and d["b"].keep is False


def test_no_policy_keeps_everything():
    snaps = hourly_series(utc(2026, 11, 1), 3)
    p = r.plan(snaps, None, NOW)
    assert len(p.keep) == 3 and p.destroy == []
    assert all(x.reasons == ["no retention policy assigned"] and x.policy is None for x in p.decisions)


def test_bad_planner_input_is_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        r.plan([], r.Policy("p", keep_last=1), datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        r.Snapshot(name=f"{DS}@a", created=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="DATASET@SNAPSHOT"):
        r.Snapshot(name=DS, created=NOW)
    with pytest.raises(ValueError, match="given twice"):
        r.plan([snap("a", utc(2026, 1, 1)), snap("a", utc(2026, 1, 2))], r.Policy("p", keep_last=1), NOW)


# --- several datasets, output ---------------------------------------------------------------------

def test_rules_apply_per_dataset_and_batches_group_by_dataset():
    other = "tank/checkpoints/job2"
    snaps = hourly_series(utc(2026, 11, 1), 4) + hourly_series(utc(2026, 11, 1, 0, 30), 3, dataset=other)
    p = r.plan(snaps, r.Policy("p", keep_last=2), NOW)
    assert sorted(x.snapshot.name for x in p.keep) == [f"{DS}@s0002", f"{DS}@s0003", f"{other}@s0001",
                                                       f"{other}@s0002"]
    assert r.batches(p) == {DS: [f"{DS}@s0000", f"{DS}@s0001"], other: [f"{other}@s0000"]}
    created = [(x.snapshot.created, x.snapshot.name) for x in p.decisions]
    assert created == sorted(created)


def test_combine_merges_plans_of_different_policies_oldest_first():
    other = "tank/datasets/imagenet"
    p1 = r.plan(hourly_series(utc(2026, 11, 1), 3), r.Policy("a", keep_last=1), NOW)
    p2 = r.plan(hourly_series(utc(2026, 11, 1, 0, 30), 3, dataset=other), r.Policy("b", keep_last=2), NOW)
    both = r.combine([p1, p2])
    assert len(both.decisions) == 6
    assert {x.policy for x in both.keep} == {"a", "b"} and len(both.keep) == 3
    assert list(r.batches(both)) == [DS, other]     # sorted by dataset name
    assert [x.snapshot.created for x in both.decisions] == sorted(x.snapshot.created for x in both.decisions)


def test_to_dict_is_json_and_complete():
    snaps = [snap("a", utc(2026, 11, 1), step=1000), snap("b", utc(2026, 11, 2), step=1500)]
    out = json.loads(json.dumps(r.plan(snaps, r.Policy("p", keep_every=1000), NOW).to_dict()))
    assert out["kept"] == 1 and out["destroyed"] == 1 and out["now"] == "2030-01-01T00:00:00+00:00"
    assert out["decisions"][0] == {"name": f"{DS}@a", "dataset": DS, "created": "2026-11-01T00:00:00+00:00",
                                   "step": 1000, "action": "keep", "keep": True, "protected": False, "policy": "p",
                                   "reasons": ["every 1000th step (step 1000)"], "notes": []}
    assert out["decisions"][1]["action"] == "destroy"
    assert out["decisions"][1]["reasons"] == ["matched no rule of policy p"]


def test_explain_text_has_one_line_per_snapshot_and_a_summary():
    snaps = hourly_series(utc(2026, 11, 1), 5, held=False) + [snap("pinned", utc(2026, 10, 1), tags=frozenset({"r"}))]
    p = r.plan(snaps, r.Policy("p", keep_last=2, pin_tags=frozenset({"r"})), NOW)
    text = r.explain_text(p)
    lines = text.splitlines()
    assert len(lines) == 7
    for line, d in zip(lines, p.decisions, strict=False):
        assert d.snapshot.name in line
        assert line.startswith("KEEP    " if d.keep else "DESTROY ")
    assert lines[0].endswith("pinned by tag r")
    assert "matched no rule of policy p: not among the last 2 (#5)" in lines[1]
    assert lines[-1] == "3 kept, 3 to destroy (now 2030-01-01T00:00:00+00:00)"
    assert "not among" not in r.explain_text(p, notes=False)


def test_thousand_snapshots_property():
    rng = random.Random(20261120)
    policies = [
        r.Policy("a", keep_last=5, keep_every=1000, daily=7, keep_best=(r.KeepBest("loss", "min", 3),),
                 pin_tags=frozenset({"release"})),
        r.Policy("b", hourly=48, weekly=4, monthly=6, yearly=1, timezone="America/New_York"),
        r.Policy("c", keep_best=(r.KeepBest("accuracy", "max", 10),), daily=3, timezone="Europe/Berlin"),
    ]
    now = utc(2026, 11, 20, 12)
    snaps = []
    for i in range(1000):
        created = now - timedelta(seconds=rng.randrange(-3600, 400 * 86400))
        metrics = {}
        if rng.random() < 0.8:
            metrics["loss"] = round(rng.random(), 2)       # rounding makes ties likely
        if rng.random() < 0.5:
            metrics["accuracy"] = rng.choice([0.5, 0.9, 0.99])
        snaps.append(snap(f"s{i:04d}", created, dataset=rng.choice([DS, "tank/checkpoints/job2"]),
                          step=rng.choice([None, 500 * rng.randrange(20)]), metrics=metrics,
                          tags=frozenset(rng.sample(["release", "x"], rng.randrange(3))),
                          held=rng.random() < 0.02, published=rng.random() < 0.02, managed=rng.random() > 0.03))
    for policy in policies:
        p = r.plan(snaps, policy, now)
        keep = {d.snapshot.name for d in p.keep}
        destroy = {d.snapshot.name for d in p.destroy}
        assert keep | destroy == {s.name for s in snaps} and not keep & destroy
        assert len(p.decisions) == 1000
        assert keep and destroy
        for d in p.destroy:
            s = d.snapshot
            assert not (s.held or s.published or not s.managed or s.created > now or s.tags & policy.pin_tags)
            assert d.reasons == [f"matched no rule of policy {policy.name}"]
        assert all(d.reasons for d in p.keep)
        # pure and deterministic: shuffled input, same plan
        shuffled = snaps[:]
        rng.shuffle(shuffled)
        assert r.plan(shuffled, policy, now).to_dict() == p.to_dict()
        total = sum(len(v) for v in r.batches(p).values())
        assert total == len(destroy)


# --- configuration ----------------------------------------------------------------------------------

METRICS = ["loss", "accuracy"]


def test_parse_the_documented_example():
    raw = {"checkpoints-default": {"keep_last": 5, "keep_every": 1000, "daily": 7,
                                   "keep_best": {"metric": "loss", "mode": "min", "count": 3},
                                   "pin_tags": ["release"]},
           "versions": {"keep_last": 3, "monthly": 0, "keep_best": [{"metric": "accuracy", "mode": "max", "count": 1},
                                                                    {"metric": "loss", "mode": "min", "count": 1}],
                        "timezone": "Europe/Berlin", "daily": None}}
    policies = r.parse_policies(raw, METRICS)
    assert policies["checkpoints-default"] == r.Policy(
        "checkpoints-default", keep_last=5, keep_every=1000, daily=7, keep_best=(r.KeepBest("loss", "min", 3),),
        pin_tags=frozenset({"release"}))
    assert policies["versions"] == r.Policy("versions", keep_last=3, monthly=0, timezone="Europe/Berlin",
                                            keep_best=(r.KeepBest("accuracy", "max", 1), r.KeepBest("loss", "min", 1)))
    assert r.parse_policies(None, METRICS) == {}


def refused(raw, metrics=METRICS) -> str:
    with pytest.raises(UserError) as err:
        r.parse_policies(raw, metrics)
    assert err.value.fix
    return str(err.value)


@pytest.mark.parametrize("raw, fragments", [
    ({"p": {"keep_lst": 5}}, ["retention.policies.p: unknown key 'keep_lst'", "did you mean 'keep_last'?",
                              "keep_last, keep_every, hourly"]),
    ({"p": {"keep_last": 1, "dayly": 3}}, ["unknown key 'dayly'", "did you mean 'daily'?"]),
    ({"p": {"keep_best": {"metric": "loss", "mode": "min", "cnt": 3}}},
     ["retention.policies.p.keep_best: unknown key 'cnt'", "did you mean 'count'?"]),
    ({"p": {"keep_last": -1}}, ["retention.policies.p.keep_last is negative (-1)"]),
    ({"p": {"daily": -7}}, ["retention.policies.p.daily is negative (-7)"]),
    ({"p": {"keep_best": {"metric": "loss", "mode": "min", "count": -3}}},
     ["retention.policies.p.keep_best.count is negative (-3)"]),
    ({"p": {"keep_last": True}}, ["keep_last must be a whole number >= 0, got True"]),
    ({"p": {"keep_last": 2.5}}, ["keep_last must be a whole number >= 0, got 2.5"]),
    ({"p": {"keep_last": "5"}}, ["keep_last must be a whole number >= 0, got '5'"]),
    ({"p": {"keep_every": 0}}, ["keep_every is too small (0)", ">= 1"]),
    ({"p": {"keep_best": {"metric": "los", "mode": "min", "count": 3}}},
     ["unknown metric 'los'", "did you mean 'loss'?", "known metrics: loss, accuracy"]),
    ({"p": {"keep_best": {"metric": "loss", "mode": "minimum", "count": 3}}},
     ["keep_best.mode: unknown mode 'minimum'", "did you mean 'min'?"]),
    ({"p": {"keep_best": {"metric": "loss", "count": 3}}}, ["keep_best: missing key 'mode'"]),
    ({"p": {"keep_best": []}}, ["keep_best is an empty list"]),
    ({"p": {"keep_best": [{"metric": "loss", "mode": "min", "count": 1}, "x"]}},
     ["retention.policies.p.keep_best[1] must be a mapping"]),
    ({"p": {}}, ["retention.policies.p keeps no snapshot by any rule", "would destroy every snapshot"]),
    ({"p": {"keep_last": 0, "daily": 0}}, ["would destroy every snapshot"]),
    ({"p": {"pin_tags": ["release"]}}, ["would destroy every snapshot"]),
    ({"p": {"keep_last": 1, "timezone": "Europe/Berln"}},
     ["retention.policies.p.timezone: unknown time zone 'Europe/Berln'", "did you mean 'Europe/Berlin'?"]),
    ({"p": {"keep_last": 1, "timezone": "../etc/passwd"}}, ["unknown time zone '../etc/passwd'"]),
    ({"p": {"keep_last": 1, "pin_tags": "release"}}, ["pin_tags must be a list of tags"]),
    ({"p": {"keep_last": 1, "pin_tags": ["a,b"]}}, ["invalid tag 'a,b'"]),
    ({"p": 5}, ["retention.policies.p must be a mapping of rules"]),
    (["p"], ["retention.policies must be a mapping"]),
])
def test_parse_errors(raw, fragments):
    message = refused(raw)
    for fragment in fragments:
        assert fragment in message


def test_parse_error_names_the_fix():
    with pytest.raises(UserError) as err:
        r.parse_policies({"p": {}}, METRICS)
    assert "keep_last: 5" in err.value.fix
    assert err.value.exit_code == 1


def test_keep_best_without_declared_metrics():
    message = refused({"p": {"keep_best": {"metric": "loss", "mode": "min", "count": 1}}}, metrics=[])
    assert "known metrics: (none declared)" in message


def test_assignment_exact_beats_globs_and_longest_glob_wins():
    policies = r.parse_policies({"a": {"keep_last": 1}, "b": {"keep_last": 2}, "c": {"keep_last": 3},
                                 "d": {"keep_last": 4}}, METRICS)
    assign = r.parse_assign({"checkpoints/*": "a", "checkpoints/llm-*": "b", "checkpoints/llm-7b": "c",
                             "datasets/*": "d"}, policies)
    assert r.resolve_assignment(assign, policies, "checkpoints/llm-7b").name == "c"
    assert r.resolve_assignment(assign, policies, "checkpoints/llm-13b").name == "b"
    assert r.resolve_assignment(assign, policies, "checkpoints/resnet").name == "a"
    assert r.resolve_assignment(assign, policies, "datasets/imagenet").name == "d"
    assert r.resolve_assignment({"checkpoints/*": "a"}, policies, "datasets/imagenet") is None
    # same length: fewer wildcards, then alphabetical
    assert r.resolve_assignment({"checkpoints/j?b1": "a", "checkpoints/jo*1": "b"}, policies,
                                "checkpoints/job1").name == "a"
    assert r.resolve_assignment({"checkpoints/jo?1": "b", "checkpoints/j?b1": "a"}, policies,
                                "checkpoints/job1").name == "a"
    with pytest.raises(UserError, match="unknown policy 'zz'"):
        r.resolve_assignment({"checkpoints/*": "zz"}, policies, "checkpoints/x")


@pytest.mark.parametrize("raw, fragments", [
    ({"checkpoints/*": "defualt"}, ["retention.assign.checkpoints/*: unknown policy 'defualt'",
                                    "did you mean 'default'?", "(policies: default)"]),
    ({"jobs/*": "default"}, ["invalid path 'jobs/*'", "checkpoints/JOB or datasets/NAME"]),
    ({"checkpoints/": "default"}, ["invalid path 'checkpoints/'"]),
    ({"checkpoints/x": 3}, ["unknown policy 3"]),
    ("x", ["retention.assign must be a mapping"]),
])
def test_parse_assign_errors(raw, fragments):
    policies = r.parse_policies({"default": {"keep_last": 1}}, METRICS)
    with pytest.raises(UserError) as err:
        r.parse_assign(raw, policies)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_parse_retention_section():
    ret = r.parse_retention({"policies": {"p": {"keep_last": 2}}, "assign": {"datasets/*": "p"}}, METRICS)
    assert ret.policy_for("datasets/x") == r.Policy("p", keep_last=2)
    assert ret.policy_for("checkpoints/x") is None
    assert r.parse_retention(None, METRICS) == r.Retention({}, {})
    with pytest.raises(UserError, match="retention: unknown key 'polices'; did you mean 'policies'"):
        r.parse_retention({"polices": {}}, METRICS)


# --- reading snapshot properties --------------------------------------------------------------------

def test_snapshot_from_properties():
    # shaped like `zfs get -Hp -o property,value creation,userrefs,fabric:... SNAP` ("-" = unset)
    props = {"creation": "1795000000", "userrefs": "1", "fabric:managed": "true",
             "fabric:created-at": "2026-11-20T10:00:00Z", "fabric:step": "3000", "fabric:metric.loss": "0.213",
             "fabric:metric.accuracy": "-", "fabric:tags": "release, best", "fabric:published": "gpu1,gpu2"}
    s = r.snapshot_from_properties(f"{DS}@step-3000", props)
    assert s == r.Snapshot(name=f"{DS}@step-3000", created=utc(2026, 11, 20, 10), step=3000, metrics={"loss": 0.213},
                           tags=frozenset({"release", "best"}), held=True, published=True, managed=True)
    bare = r.snapshot_from_properties("tank/x@manual", {"creation": "1795000000", "fabric:managed": "-",
                                                        "userrefs": "0", "fabric:published": "-"})
    assert bare.created == datetime.fromtimestamp(1795000000, UTC)
    assert (bare.managed, bare.held, bare.published, bare.step, bare.tags) == (False, False, False, None, frozenset())
    assert r.snapshot_from_properties("tank/x@a", {"creation": "1"}, held=True).held is True


@pytest.mark.parametrize("props, fragment", [
    ({"creation": "1", "fabric:step": "x"}, "invalid fabric:step 'x'"),
    ({"creation": "1", "fabric:metric.loss": "low"}, "invalid fabric:metric.loss 'low'"),
    ({"fabric:created-at": "yesterday"}, "invalid fabric:created-at 'yesterday'"),
    ({"creation": "-"}, "no creation time"),
])
def test_snapshot_from_properties_refuses_malformed_values(props, fragment):
    with pytest.raises(UserError) as err:
        r.snapshot_from_properties("tank/x@a", props)
    assert fragment in str(err.value)
