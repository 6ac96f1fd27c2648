"""tests/integration/sharding.py: which shard of `make test`'s integration runs collects which file."""

import sys
from pathlib import Path

import pytest
from support import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import sharding  # noqa: E402

FILES = sorted(sharding.SECONDS)


@pytest.mark.parametrize("count", [1, 2, 3])
def test_every_file_is_in_exactly_one_shard_and_the_answer_does_not_depend_on_the_order(count):
    got = sharding.shard_of(FILES, count)
    assert sorted(got) == FILES and set(got.values()) <= set(range(1, count + 1))
    assert sharding.shard_of(list(reversed(FILES)), count) == got


def test_the_files_that_boot_storage2_share_a_shard_and_the_load_is_dealt_evenly():
    got = sharding.shard_of(FILES, 2)
    assert len({got[name] for name in sharding.TOGETHER}) == 1
    load = [sum(sharding.SECONDS[n] for n in FILES if got[n] == k) for k in (1, 2)]
    # dealt longest first to the lighter shard: no shard carries more than the other plus its longest unit
    longest = max(sum(sharding.SECONDS[n] for n in sharding.TOGETHER), max(sharding.SECONDS.values()))
    assert abs(load[0] - load[1]) <= longest


def test_an_unknown_file_counts_the_default_and_still_gets_a_shard():
    got = sharding.shard_of(["test_new.py", "test_lab.py"], 2)
    assert got == {"test_new.py": 1, "test_lab.py": 2}  # 300 s (the default) first, then 90 s to the lighter


@pytest.mark.parametrize("text", ["2", "0/2", "3/2", "a/b", "1/0", "1/2/3"])
def test_a_malformed_shard_is_refused_naming_the_fix(text):
    with pytest.raises(ValueError, match="unset it"):
        sharding.parse_shard(text)


def test_no_shard_asked_means_none_and_k_of_n_parses():
    assert sharding.parse_shard(None) is None and sharding.parse_shard("") is None
    assert sharding.parse_shard("2/2") == (2, 2)


def test_a_shards_pytest_summary_is_kept_from_its_header_on_to_print_again_at_the_end(capsys):
    import io
    import threading
    run_shards = load_file(Path(__file__).resolve().parents[1] / "run-shards", "run_shards")
    out = (b"tests/integration/test_a.py::test_x PASSED\n"
           b"==== short test summary info ====\n"
           b"FAILED tests/integration/test_a.py::test_y - AssertionError: 2 != 3\n"
           b"==== 1 failed, 9 passed in 60.00s ====\n")
    summary = []
    run_shards.pump("[shard 2]", io.BytesIO(out), threading.Lock(), summary)
    assert summary == ["==== short test summary info ====",
                       "FAILED tests/integration/test_a.py::test_y - AssertionError: 2 != 3",
                       "==== 1 failed, 9 passed in 60.00s ===="]
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "[shard 2] tests/integration/test_a.py::test_x PASSED" and len(printed) == 4
