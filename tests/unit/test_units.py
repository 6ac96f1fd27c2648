"""fabric_core.base.units: the parsers of counts (175B parameters) and durations (1h30m), decimal byte units and
the duration formatter (human_bytes is tested in test_rules.py)."""

from __future__ import annotations

import pytest
import support  # noqa: F401  (puts module_utils on sys.path)

# isort: split
from fabric_core.base.errors import UserError
from fabric_core.base.units import format_duration, parse_count, parse_duration, si_bytes


@pytest.mark.parametrize("text, value", [
    ("175e9", 175e9), ("175B", 175e9), ("175b", 175e9), ("175G", 175e9), ("7B", 7e9), ("70M", 70e6),
    ("1.5T", 1.5e12), ("8K", 8e3), ("8k", 8e3), ("175000000000", 175e9), ("7_000_000", 7e6), (" 13B ", 13e9),
    ("0.5B", 5e8), ("0", 0.0), ("-7B", -7e9), (42, 42.0), (1.5e9, 1.5e9),
])
def test_counts(text, value):
    assert parse_count(text) == value


@pytest.mark.parametrize("text", ["", "B", "seven", "7X", "7BB", "1e", "inf", "nan", "7 B B", True])
def test_bad_counts(text):
    with pytest.raises(UserError) as err:
        parse_count(text, "number of parameters")
    assert "invalid number of parameters" in err.value.problem and "175B" in err.value.fix


@pytest.mark.parametrize("text, seconds", [
    ("1h", 3600), ("30m", 1800), ("3600s", 3600), ("1h30m", 5400), ("1h 30m", 5400), ("1.5h", 5400),
    ("2d", 172800), ("1d2h3m4s", 93784), ("90", 90), ("0.5", 0.5), ("1H", 3600), ("0s", 0), ("-1h", -3600),
    (600, 600.0),
])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "an hour", "1x", "1h30", "30m1h", "1h1h", "1e3s", "inf", "1 hour", "-"])
def test_bad_durations(text):
    with pytest.raises(UserError) as err:
        parse_duration(text, "checkpoint interval")
    assert "invalid checkpoint interval" in err.value.problem and "1h30m" in err.value.fix


@pytest.mark.parametrize("n, text", [(None, "-"), (5, "5 B"), (1500, "1.50 kB"), (2.45e12, "2.45 TB"),
                                     (13.611e9, "13.6 GB"), (999.999e6, "1.00 GB"), (120.5e6, "120 MB"),
                                     (-2e6, "-2.00 MB")])
def test_si_bytes(n, text):
    assert si_bytes(n) == text


@pytest.mark.parametrize("seconds, text", [(180, "3m"), (5400, "1h30m"), (3600, "1h"), (12.5, "12.5s"), (0, "0s"),
                                           (90061, "1d1h1m1s"), (None, "-")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text
    if seconds and seconds >= 60:
        assert parse_duration(text) == seconds  # the inverse
