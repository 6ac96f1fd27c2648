"""The checkpoint planner (fabric_core.services.ckplan) and `fabricctl plan checkpoint`: the arithmetic (the issue's
175-billion-parameter example), the benchmarks' figures read from results documents, the bottleneck, bad
input as UserErrors, and the command end to end through fabricctl's entry point with a results directory in
tmp_path (present, absent, unreadable). The parsers of counts and durations are in test_units.py."""

from __future__ import annotations

import json

import pytest
import support  # noqa: F401  (puts module_utils on sys.path)

# isort: split
from fabric_core.base.errors import EXIT_USER, UserError
from fabric_core.services import ckplan

from fabricctl.main import main

CHECKPOINT_DOC = {  # the shape of checkpoint_bench.py's figures (its writer runs: 1 GiB with O_DIRECT)
    "date": "2026-11-23T20:08:00+00:00", "commit": "abc1234", "lab": "storage1 + gpu1 (TCG)", "ratios": {},
    "figures": {"freeze": [{"step": None, "mb_s": 120.5, "seconds": 8.9},
                           {"step": 11000, "mb_s": 100.0, "freeze_s": 0.4},
                           {"step": 21000, "mb_s": 90.0, "freeze_s": 0.3}]}}
READ_DOC = {  # read.json with read_loader.py's document under figures
    "date": "2026-11-25T10:00:00+00:00", "commit": "def5678", "lab": "gpu1 (TCG)", "ratios": {},
    "figures": {"epochs": [{"epoch": 1, "mb_s": 80.0}, {"epoch": 2, "mb_s": 400.0}]}}


# --- the arithmetic -------------------------------------------------------------------------------------

def test_a_175_billion_parameter_model_at_one_hour_needs_about_13_6_gb_s():
    p = ckplan.plan(175e9, 3600)
    assert p.checkpoint_bytes == 175e9 * 14 == 2.45e12  # about 2.4 TB
    assert p.write.need.seconds == 180  # 5 % of 60 minutes: 3 minutes
    assert p.write.need.bytes_per_second == pytest.approx(13.61e9, rel=1e-3)  # about 13.6 GB/s
    assert p.write.need.mb_s == pytest.approx(13611.1, abs=0.1)
    # restore: one rank reads it within the same 5 % by default
    assert p.restore_default and p.restore.need.seconds == 180 and p.restore.need.bytes == 2.45e12


def test_fourteen_bytes_per_parameter_are_fp32_weights_adam_moments_and_bf16_weights():
    assert ckplan.BYTES_PER_PARAM == 4 + 4 + 4 + 2 == 14
    assert ckplan.BUDGET_PERCENT == 5


def test_every_rank_reads_the_whole_checkpoint_on_a_restore():
    p = ckplan.plan(7e9, 1800, ranks=64, restore_seconds=600)
    assert p.checkpoint_bytes == 98e9
    assert p.restore.need.bytes == 64 * 98e9
    assert p.restore.need.bytes_per_second == pytest.approx(64 * 98e9 / 600)
    assert not p.restore_default
    assert p.write.need.seconds == 90  # the write window does not move with the restore budget


def test_budget_and_bytes_per_param_scale_the_need():
    p = ckplan.plan(1e9, 3600, bytes_per_param=2, budget_percent=10)
    assert p.write.need.seconds == 360 and p.write.need.bytes == 2e9
    assert p.restore.need.seconds == 360  # the same share by default


@pytest.mark.parametrize("kwargs, words", [
    ({"params": 0}, "number of parameters (--params) must be more than 0"),
    ({"params": -7e9}, "number of parameters"),
    ({"params": float("nan")}, "number of parameters"),
    ({"interval_seconds": 0}, "checkpoint interval (--interval) must be more than 0"),
    ({"interval_seconds": -60}, "checkpoint interval"),
    ({"budget_percent": 0}, "--budget-percent) must be more than 0 and at most 100"),
    ({"budget_percent": 100.5}, "at most 100"),
    ({"bytes_per_param": 0}, "bytes per parameter"),
    ({"ranks": 0}, "ranks (--ranks) must be a whole number of at least 1"),
    ({"ranks": 2.5}, "ranks"),
    ({"restore_seconds": 0}, "restore budget (--restore-within) must be more than 0"),
])
def test_bad_input_names_the_problem_and_the_fix(kwargs, words):
    args = {"params": 175e9, "interval_seconds": 3600, **kwargs}
    with pytest.raises(UserError) as err:
        ckplan.plan(args.pop("params"), args.pop("interval_seconds"), **args)
    assert words in err.value.problem
    assert err.value.fix


def test_a_hundred_percent_budget_is_allowed():
    assert ckplan.plan(1e9, 100, budget_percent=100).write.need.seconds == 100


# --- measured figures and the bottleneck ----------------------------------------------------------------

def test_the_write_figure_is_the_writer_alone_and_the_read_figure_the_coldest_epoch():
    measured, notes = ckplan.measured_from_results({"checkpoint": CHECKPOINT_DOC, "read": READ_DOC})
    assert notes == []
    assert measured["write"].mb_s == 120.5
    assert measured["write"].source == "bench/results/checkpoint.json figures.freeze[writer alone].mb_s"
    assert measured["write"].run == "2026-11-23T20:08:00+00:00, abc1234 on storage1 + gpu1 (TCG)"
    assert measured["restore"].mb_s == 80.0
    assert "slowest of figures.epochs[].mb_s" in measured["restore"].source


def test_explicit_figures_win_and_other_shapes_are_read():
    assert ckplan.write_mb_s({"figures": {"write_mb_s": 900, "freeze": [{"step": None, "mb_s": 1}]}}) == \
        (900.0, "figures.write_mb_s")
    assert ckplan.write_mb_s({"figures": {"freeze": [{"step": 1, "mb_s": 10}, {"step": 2, "mb_s": 30},
                                                     {"step": 3, "mb_s": 20}]}}) == \
        (20.0, "median of figures.freeze[].mb_s")
    assert ckplan.read_mb_s({"figures": {"read_mb_s": 2500.5}}) == (2500.5, "figures.read_mb_s")
    assert ckplan.read_mb_s({"figures": {"loader": {"epochs": [{"mb_s": 50}, {"mb_s": 70}]}}}) == \
        (50.0, "slowest of figures.loader.epochs[].mb_s")
    for doc in ({}, {"figures": None}, {"figures": {"freeze": [{"mb_s": None}, {"mb_s": True}, "x"]}},
                {"figures": {"write_mb_s": 0}}):
        assert ckplan.write_mb_s(doc) is None
    assert ckplan.read_mb_s({"figures": {"epochs": [{"mb_s": -1}]}}) is None
    bench_read = {"shards": {"iscsi-ext4": {"8w_epoch1": {"mb_s": 31.5}, "8w_epoch2": {"mb_s": 60}}},
                  "iscsi-ext4": {"8w_epoch1": {"mb_s": 20}}}  # make bench-read's shape: the cold shards read
    assert ckplan.read_mb_s({"figures": bench_read})[0] == 31.5
    assert ckplan.read_mb_s({"figures": {"shards": {"local": {}}}}) is None


def test_missing_results_are_not_measured_yet_with_the_make_target():
    measured, notes = ckplan.measured_from_results({"checkpoint": None, "read": {"figures": {}}})
    assert measured == {"write": None, "restore": None}
    assert notes == ["write bandwidth not measured yet (no bench/results/checkpoint.json): run make bench-checkpoint",
                     "restore bandwidth not measured yet (no bandwidth figure in bench/results/read.json): "
                     "run make bench-read"]
    p = ckplan.plan(175e9, 3600, measured=measured)
    assert p.bottleneck == "unknown" and p.write.status == "not measured" and p.write.headroom is None


def _measured(write: float | None, read: float | None) -> dict:
    return {"write": None if write is None else ckplan.Measured(write, "w"),
            "restore": None if read is None else ckplan.Measured(read, "r")}


@pytest.mark.parametrize("write, read, bottleneck", [
    (20000, 20000, "none"),
    (1000, 20000, "write bandwidth"),
    (20000, 1000, "restore bandwidth"),
    (1000, 1000, "write and restore bandwidth"),
    (1000, None, "write bandwidth"),  # too slow is known even when the other side is not measured
    (20000, None, "unknown"),
    (13611.2, 13611.2, "none"),  # exactly enough (13611.1 MB/s needed) is enough
])
def test_the_bottleneck_is_the_side_slower_than_needed(write, read, bottleneck):
    p = ckplan.plan(175e9, 3600, measured=_measured(write, read))
    assert p.bottleneck == bottleneck
    d = p.to_dict()
    assert d["bottleneck"] == bottleneck
    assert d["write"]["headroom"] == pytest.approx(write / 13611.111, abs=1e-3)


# --- the command ------------------------------------------------------------------------------------

def test_the_command_is_registered_read_only_under_plan():
    from fabricctl import commands
    from fabricctl.commands import plan_checkpoint

    assert plan_checkpoint in commands.ALL
    assert plan_checkpoint.PATH == ("plan", "checkpoint") and plan_checkpoint.MUTATING is False


def test_the_175b_example_without_results_says_not_measured_yet(tmp_path, capsys):
    assert main(["plan", "checkpoint", "--params", "175B", "--interval", "1h", "--results",
                 str(tmp_path / "missing")]) == 0
    out = capsys.readouterr().out
    assert "175,000,000,000 parameters x 14 bytes = 2.45 TB every 1h" in out
    assert "write    2.45 TB  3m (5% of 1h)  13.6 GB/s" in out
    assert "restore  2.45 TB  3m (5% of 1h)  13.6 GB/s" in out
    assert "bottleneck: unknown" in out
    assert "not measured yet (no bench/results/checkpoint.json): run make bench-checkpoint" in out
    assert "run make bench-read" in out


def test_the_command_compares_with_the_measured_figures(tmp_path, capsys):
    (tmp_path / "checkpoint.json").write_text(json.dumps(CHECKPOINT_DOC))
    (tmp_path / "read.json").write_text(json.dumps(READ_DOC))
    assert main(["plan", "checkpoint", "--params", "70M", "--interval", "30m", "--ranks", "7",
                 "--results", str(tmp_path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["checkpoint_bytes"] == 70e6 * 14 == 980e6
    assert d["write"]["seconds"] == 90 and d["write"]["needed_mb_s"] == pytest.approx(980 / 90, abs=1e-3)
    assert d["restore"]["bytes"] == 7 * 980e6 and d["restore"]["needed_mb_s"] == pytest.approx(7 * 980 / 90, abs=1e-3)
    assert d["write"]["measured_mb_s"] == 120.5 and d["write"]["status"] == "ok"
    assert d["restore"]["measured_mb_s"] == 80.0 and d["restore"]["status"] == "ok"  # 76.2 MB/s needed
    assert d["bottleneck"] == "none" and d["notes"] == []

    assert main(["plan", "checkpoint", "--params", "7B", "--interval", "1h30m", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "bottleneck: write and restore bandwidth" in out
    assert "write measured: bench/results/checkpoint.json figures.freeze[writer alone].mb_s (2026-11-23" in out


def test_the_restore_budget_can_be_given(tmp_path, capsys):
    assert main(["plan", "checkpoint", "--params", "175e9", "--interval", "3600s", "--restore-within", "10m",
                 "--budget-percent", "5%", "--results", str(tmp_path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["restore_seconds"] == 600 and d["restore_budget"] == "given"
    assert d["write"]["seconds"] == 180


def test_an_unreadable_results_file_counts_as_not_measured(tmp_path, capsys):
    (tmp_path / "checkpoint.json").write_text("{not json")
    assert main(["plan", "checkpoint", "--params", "7B", "--interval", "1h", "--results", str(tmp_path),
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["write"]["status"] == "not measured"
    assert any("checkpoint.json does not read as a results document" in n for n in d["notes"])


@pytest.mark.parametrize("argv, words", [
    (["--params", "0", "--interval", "1h"], "the number of parameters (--params) must be more than 0"),
    (["--params=-7B", "--interval", "1h"], "the number of parameters (--params) must be more than 0"),
    (["--params", "seven", "--interval", "1h"], "invalid number of parameters (--params) 'seven'"),
    (["--params", "7B", "--interval", "an hour"], "invalid checkpoint interval (--interval) 'an hour'"),
    (["--params", "7B", "--interval", "0s"], "the checkpoint interval (--interval) must be more than 0"),
    (["--params", "7B", "--interval", "1h", "--budget-percent", "0"], "at most 100, got 0"),
    (["--params", "7B", "--interval", "1h", "--budget-percent", "150"], "at most 100, got 150"),
    (["--params", "7B", "--interval", "1h", "--budget-percent", "lots"], "invalid checkpoint budget"),
    (["--params", "7B", "--interval", "1h", "--ranks", "2.5"], "ranks (--ranks) must be a whole number"),
    (["--params", "7B", "--interval", "1h", "--ranks", "0"], "at least 1"),
    (["--params", "7B", "--interval", "1h", "--restore-within", "soon"], "invalid restore budget"),
    (["--params", "7B", "--interval", "1h", "--bytes-per-param", "x"], "invalid bytes per parameter"),
])
def test_bad_input_exits_as_a_user_error_with_a_fix(tmp_path, capsys, argv, words):
    assert main(["plan", "checkpoint", *argv, "--results", str(tmp_path)]) == EXIT_USER
    err = capsys.readouterr().err
    assert words in err and "fix: " in err
