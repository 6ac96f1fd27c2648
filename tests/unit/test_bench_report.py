"""bench/report.py's merge_json: bench/results/attach.json (issue 29) is shared by bench-storm, bench-grant and
bench-prolog, each merging its run in. Another benchmark's keys are kept, this one's replaced; written in a tmp
directory, never the real results folder."""

from __future__ import annotations

import json

import pytest
from support import load_bench

storm = load_bench("storm_bench")
grant = load_bench("grant_bench")
prolog = load_bench("bench_prolog")
import report  # noqa: E402  (bench/ is on sys.path once load_bench ran)

WHEN = "2030-01-02T03:04:05+00:00"
HEAD = "abc1234"

# attach.json as another run left it: storm and grant measured before, figures and ratios of both
BEFORE = {
    "date": "2026-11-28T08:55:58+00:00", "commit": "8164dd4", "lab": "QEMU TCG lab (docs/lab.md)",
    "figures": {"storm64_s": 12.0, "storm_one_s": 1.0, "grant500_s": 4.0, "grant500_floor_s": 2.0,
                "prolog_added_s_1node": 1.0, "prolog_added_s_2nodes": 1.1},
    "ratios": {"storm64_over_one": 12.0, "grant500_over_floor": 2.0, "prolog_2nodes_over_1node": 1.1},
    "runs": {"storm": {"date": "2026-11-27T00:00:00+00:00", "commit": "1111111", "rounds": 3, "initiators": 64,
                       "seconds": []},
             "grant": {"date": "2026-11-28T08:55:58+00:00", "commit": "8164dd4", "rounds": 3, "hosts": 500,
                       "seconds": []}},
    "note": "a key no benchmark writes",
}


@pytest.fixture(autouse=True)
def stamp(monkeypatch):
    monkeypatch.setattr(report, "now", lambda: WHEN)
    monkeypatch.setattr(report, "commit", lambda: HEAD)


def existing(tmp_path, doc: dict = BEFORE):
    (tmp_path / "attach.json").write_text(json.dumps(doc))
    return tmp_path


def read(folder) -> dict:
    return json.loads((folder / "attach.json").read_text())


def test_merge_keeps_other_benches_keys_and_replaces_its_own(tmp_path):
    folder = existing(tmp_path)
    path = report.merge_json("attach", "grant", {"grant500_s": 3.0, "grant500_floor_s": 2.5},
                             {"grant500_over_floor": 1.2}, {"rounds": 5, "hosts": 500, "seconds": [1]}, folder=folder)
    assert path == folder / "attach.json"
    doc = read(folder)
    assert doc["figures"] == {**BEFORE["figures"], "grant500_s": 3.0, "grant500_floor_s": 2.5}
    assert doc["ratios"] == {**BEFORE["ratios"], "grant500_over_floor": 1.2}
    assert doc["runs"]["storm"] == BEFORE["runs"]["storm"]  # another bench's run, untouched
    assert doc["runs"]["grant"] == {"date": WHEN, "commit": HEAD, "rounds": 5, "hosts": 500, "seconds": [1]}
    assert (doc["date"], doc["commit"], doc["lab"]) == (WHEN, HEAD, BEFORE["lab"])
    assert doc["note"] == BEFORE["note"]
    assert path.read_text() == json.dumps(doc, indent=2, sort_keys=True) + "\n"  # write_json's format


def test_merge_keeps_own_keys_this_run_did_not_give(tmp_path):
    folder = existing(tmp_path)
    report.merge_json("attach", "storm", {"storm64_s": 10.0}, {}, {"rounds": 1}, folder=folder)
    doc = read(folder)
    assert doc["figures"]["storm_one_s"] == 1.0 and doc["figures"]["storm64_s"] == 10.0
    assert doc["ratios"] == BEFORE["ratios"]


def test_merge_into_no_file_makes_the_folder_and_the_lab(tmp_path):
    folder = tmp_path / "results"
    report.merge_json("attach", "grant", {"grant500_s": 3.0}, {"grant500_over_floor": 1.2}, {"rounds": 1},
                      measured="def5678", folder=folder)
    assert read(folder) == {"date": WHEN, "commit": "def5678", "lab": "QEMU TCG lab (docs/lab.md)",
                            "figures": {"grant500_s": 3.0}, "ratios": {"grant500_over_floor": 1.2},
                            "runs": {"grant": {"date": WHEN, "commit": "def5678", "rounds": 1}}}


def test_merge_keeps_the_files_lab_when_it_has_one(tmp_path):
    folder = existing(tmp_path, {**BEFORE, "lab": "another lab"})
    report.merge_json("attach", "grant", {}, {}, {}, lab="this lab", folder=folder)
    assert read(folder)["lab"] == "another lab"
    folder = existing(tmp_path, {**BEFORE, "lab": ""})
    report.merge_json("attach", "grant", {}, {}, {}, lab="this lab", folder=folder)
    assert read(folder)["lab"] == "this lab"


def test_storm_writes_the_commit_measured(tmp_path):
    folder = existing(tmp_path)
    result = {"commit": "def5678", "figures": {"storm64_s": 9.0}, "ratios": {"storm64_over_one": 9.0},
              "rounds": 2, "initiators": 64, "runs": [{"one": 1.0}]}
    storm.write_results(result, folder)
    doc = read(folder)
    assert doc["commit"] == "def5678"
    assert doc["runs"]["storm"] == {"date": WHEN, "commit": "def5678", "rounds": 2, "initiators": 64,
                                    "seconds": [{"one": 1.0}]}
    assert doc["runs"]["grant"] == BEFORE["runs"]["grant"]
    assert doc["figures"]["grant500_s"] == 4.0 and doc["ratios"]["storm64_over_one"] == 9.0


def test_grant_writes_its_run(tmp_path):
    folder = existing(tmp_path)
    result = {"figures": {"grant500_s": 3.0}, "ratios": {"grant500_over_floor": 1.5}, "rounds": 3, "hosts": 500,
              "runs": [{"grant_s": 3.0}]}
    grant.write_results(result, folder)
    doc = read(folder)
    assert doc["runs"]["grant"] == {"date": WHEN, "commit": HEAD, "rounds": 3, "hosts": 500,
                                    "seconds": [{"grant_s": 3.0}]}
    assert doc["ratios"] == {**BEFORE["ratios"], "grant500_over_floor": 1.5}
    assert doc["figures"]["storm64_s"] == 12.0


PROLOG = {"figures": {"prolog_added_s_1node": 2.0, "prolog_added_s_2nodes": 2.5}, "rounds": 5,
          "runs": {"1node_with": [3.0]}, "plugin_attach_s": {"gpu1": 1.2}}


def test_prolog_writes_its_ratio(tmp_path):
    folder = existing(tmp_path)
    prolog.write_results(PROLOG, folder)
    doc = read(folder)
    assert doc["ratios"] == {**BEFORE["ratios"], "prolog_2nodes_over_1node": 1.25}
    assert doc["runs"]["prolog"] == {"date": WHEN, "commit": HEAD, "rounds": 5, "seconds": {"1node_with": [3.0]},
                                     "plugin_attach_s": {"gpu1": 1.2}}
    assert doc["runs"]["storm"] == BEFORE["runs"]["storm"] and doc["figures"]["grant500_s"] == 4.0


def test_prolog_without_a_1node_figure_keeps_the_files_ratio(tmp_path):
    folder = existing(tmp_path)
    prolog.write_results({**PROLOG, "figures": {"prolog_added_s_1node": 0.0, "prolog_added_s_2nodes": 0.3}}, folder)
    doc = read(folder)
    assert doc["ratios"] == BEFORE["ratios"]
    assert doc["figures"]["prolog_added_s_1node"] == 0.0
