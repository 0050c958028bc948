"""The one version-range convention of the packs: [introduced, removed)."""

from __future__ import annotations

import msgspec
import pytest
from packaging.version import InvalidVersion
from packaging.version import Version as Pep440

from service.versions import NEWEST, VersionRange, parse_version


def test_removed_is_the_first_release_without_it() -> None:
    span = VersionRange(introduced="0.8.0", removed="0.11.0")
    assert span.contains((0, 8, 0))
    assert span.contains((0, 10, 2))
    assert not span.contains((0, 11, 0))
    assert not span.contains((0, 7, 3))


def test_an_unknown_version_counts_as_the_newest_release() -> None:
    assert VersionRange(introduced="0.9.0").contains(None)
    assert not VersionRange(removed="0.11.0").contains(None)


def test_inclusive_bounds_cover_every_patch_of_the_last_minor() -> None:
    assert VersionRange(introduced="0.8.5", removed="0.22.0").inclusive() == ((0, 8, 5), (0, 21, 999))
    assert VersionRange(removed="0.8.5").inclusive() == ((0, 0, 0), (0, 8, 4))
    assert VersionRange().inclusive() == ((0, 0, 0), NEWEST)
    assert VersionRange().is_open


@pytest.mark.parametrize(
    "fields",
    [{"introduced": "0.11.0", "removed": "0.8.0"}, {"introduced": "soon"}, {"min": "0.8.0"}],
)
def test_a_bad_range_is_a_decode_error(fields: dict[str, str]) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(fields, VersionRange)


@pytest.mark.parametrize(
    "text",
    [
        "0.10.2",
        "v0.9",
        "V1.2.3.4",
        " 0.8.5 ",
        "00.010.2",
        "1",
        "0..1",
        "v",
        "",
        ".1",
        "1.",
        "0.1٣",
        "0.12.0rc1",
        "0.8.5.post1",
        "0.11.1.dev42+g1234abc",
        "1!2.0",
        "0.x",
    ],
)
def test_a_plain_release_reads_as_packaging_reads_it(text: str) -> None:
    try:
        expected = (*Pep440(text.strip()).release, 0, 0)[:3]
    except InvalidVersion:
        expected = None
    assert parse_version(text) == expected
