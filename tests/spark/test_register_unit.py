"""register()'s pyspark floor, checked without a session."""

from __future__ import annotations

import pytest

from strom.spark import PYSPARK_FLOOR, PySparkVersionError, check_pyspark_version


@pytest.mark.parametrize("version", ["4.0.1", "4.1.0", "3.5.3"])
def test_pyspark_below_the_floor_is_refused_naming_the_upgrade(version: str) -> None:
    with pytest.raises(
        PySparkVersionError, match=rf"found pyspark {version}\. Upgrade it: pip install 'pyspark>=4\.2,<5'"
    ):
        check_pyspark_version(version)


@pytest.mark.parametrize("version", ["4.2.0", "4.3.0", "4.2.0.dev1", "5.0.0rc1"])
def test_pyspark_at_or_above_the_floor_passes(version: str) -> None:
    check_pyspark_version(version)
    assert PYSPARK_FLOOR == (4, 2)
