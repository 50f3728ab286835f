import pytest

from poet_compiler.errors import BudgetError
from poet_compiler.units import parse_duration, parse_relative, parse_size


@pytest.mark.parametrize("text, expected", [("256k", 262144), ("256KiB", 262144), ("1.5M", 1572864),
                                            ("4096", 4096), ("2g", 2 << 30), ("256kb", 262144), (12, 12)])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["0", "-1", "abc", "256kk", "", "1.5.2k", "256i", -5, 0])
def test_bad_sizes(text):
    with pytest.raises(BudgetError):
        parse_size(text)


def test_durations_and_relative():
    assert parse_duration("120ms") == pytest.approx(0.12)
    assert parse_duration("2.5s") == 2.5
    assert parse_relative("1.5x", "x") == 1.5
    assert parse_relative("50%", "%") == 0.5
    assert parse_relative("120ms", "x") is None
    with pytest.raises(BudgetError):
        parse_duration("soon")
    with pytest.raises(BudgetError):
        parse_relative("-2x", "x")
