import pytest

from modelbuild.core.units import format_size, parse_size


@pytest.mark.parametrize("text, expected", [("500M", 500 << 20), ("2G", 2 << 30), ("1024", 1024),
                                            ("1.5KiB", 1536), ("0", 0)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["lots", "-1M", ""])
def test_parse_size_refuses_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_format_size_round_trips_through_parse_size():
    assert format_size(1536) == "1.5 KiB" and parse_size("1.5 KiB") == 1536
    assert format_size(512) == "512 B"
