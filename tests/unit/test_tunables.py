"""ZFS module parameters: file rendering, live diff, dry run, refusals (on a temporary sysfs)."""

import pytest
import support  # noqa: F401  (puts module_utils on sys.path)
from fabric_core.base.errors import NotFound, UserError
from fabric_core.base.runner import Runner
from fabric_core.storage import tunables


@pytest.fixture
def sysfs(tmp_path):
    d = tmp_path / "parameters"
    d.mkdir()
    (d / "zfs_arc_max").write_text("0\n")
    (d / "l2arc_noprefetch").write_text("1\n")
    return d


def test_render_is_sorted_and_stable():
    text = tunables.render_modprobe({"zfs_arc_max": 5, "l2arc_noprefetch": False})
    assert text.endswith("options zfs l2arc_noprefetch=0 zfs_arc_max=5\n")


def test_first_run_writes_file_and_live_values_second_run_changes_nothing(sysfs, tmp_path):
    conf = tmp_path / "zfs.conf"
    params = {"zfs_arc_max": 536870912, "l2arc_noprefetch": 0}
    first = tunables.ensure(Runner(), params, sysfs=sysfs, modprobe_file=conf)
    assert first["changed"] and first["file_changed"]
    assert first["live_changed"] == {"zfs_arc_max": {"before": "0", "after": "536870912"},
                                     "l2arc_noprefetch": {"before": "1", "after": "0"}}
    assert (sysfs / "zfs_arc_max").read_text() == "536870912"
    assert "options zfs l2arc_noprefetch=0 zfs_arc_max=536870912" in conf.read_text()
    second = tunables.ensure(Runner(), params, sysfs=sysfs, modprobe_file=conf)
    assert not second["changed"] and second["live_changed"] == {}


def test_dry_run_reports_and_writes_nothing(sysfs, tmp_path):
    conf = tmp_path / "zfs.conf"
    runner = Runner(dry_run=True)
    result = tunables.ensure(runner, {"zfs_arc_max": 1024}, sysfs=sysfs, modprobe_file=conf)
    assert result["changed"] and not conf.exists()
    assert (sysfs / "zfs_arc_max").read_text() == "0\n"
    # every write of the plan recorded, none made
    assert runner.planned == [("write", str(conf)), ("write", str(sysfs / "zfs_arc_max"), "1024")]
    assert result["commands"] == [list(e) for e in runner.planned] and runner.executed == []


def test_the_plan_is_pure(sysfs, tmp_path):
    conf = tmp_path / "zfs.conf"
    live = tunables.read({"zfs_arc_max": 1024}, sysfs=sysfs, modprobe_file=conf)
    plan = tunables.plan({"zfs_arc_max": 1024}, live)
    again = tunables.plan({"zfs_arc_max": 1024}, live)  # the same live state, the same plan
    assert [s.to_dict() for s in again.steps] == [s.to_dict() for s in plan.steps] and again.after == plan.after
    assert [s.to_dict() for s in plan.steps] == [
        {"description": f"write {conf} (1 parameter(s))", "call": ["write", str(conf)]},
        {"description": "set zfs_arc_max=1024 live (was 0)", "call": ["write", str(sysfs / "zfs_arc_max"), "1024"]}]
    assert not conf.exists() and (sysfs / "zfs_arc_max").read_text() == "0\n"  # planning wrote nothing
    assert plan.live_changed == {"zfs_arc_max": {"before": "0", "after": "1024"}} and plan.file_changed


def test_live_drift_alone_is_corrected(sysfs, tmp_path):
    conf = tmp_path / "zfs.conf"
    tunables.ensure(Runner(), {"zfs_arc_max": 1024}, sysfs=sysfs, modprobe_file=conf)
    (sysfs / "zfs_arc_max").write_text("2048\n")  # someone changed it by hand
    result = tunables.ensure(Runner(), {"zfs_arc_max": 1024}, sysfs=sysfs, modprobe_file=conf)
    assert result["changed"] and not result["file_changed"]
    assert result["live_changed"] == {"zfs_arc_max": {"before": "2048", "after": "1024"}}


def test_unknown_parameter_and_bad_values_are_refused_before_any_write(sysfs, tmp_path):
    conf = tmp_path / "zfs.conf"
    with pytest.raises(NotFound, match="unknown ZFS module parameter 'zfs_arc_maxx'"):
        tunables.ensure(Runner(), {"zfs_arc_maxx": 1}, sysfs=sysfs, modprobe_file=conf)
    with pytest.raises(UserError, match="must be a non-negative integer"):
        tunables.ensure(Runner(), {"zfs_arc_max": "8G"}, sysfs=sysfs, modprobe_file=conf)
    assert not conf.exists()


def test_module_not_loaded(tmp_path):
    with pytest.raises(NotFound, match="zfs kernel module is not loaded"):
        tunables.read_live({"zfs_arc_max": 1}, sysfs=tmp_path / "absent")
    # ensure() writes the file only: modprobe applies it when the module loads
    conf = tmp_path / "zfs.conf"
    result = tunables.ensure(Runner(), {"zfs_arc_max": 1024}, sysfs=tmp_path / "absent", modprobe_file=conf)
    assert result["changed"] and result["file_changed"] and not result["module_loaded"]
    assert result["live_changed"] == {} and "zfs_arc_max=1024" in conf.read_text()
