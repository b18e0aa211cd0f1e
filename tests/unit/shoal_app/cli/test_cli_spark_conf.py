"""``shoal spark ingest|compact --conf spark.KEY=VALUE``: spark-submit's form, checked before Spark starts."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from shoal_app.cli.main import cli
from shoal_app.cli.spark import _spark_conf


def test_conf_pairs_parse_and_bad_ones_are_refused() -> None:
    assert _spark_conf(("spark.driver.host=ingest", "spark.cores.max=1", "spark.x=a=b")) == (
        ("spark.driver.host", "ingest"),
        ("spark.cores.max", "1"),
        ("spark.x", "a=b"),
    )
    for bad in ("spark.driver.host", "driver.host=x", "=x", "java.opts=1"):
        with pytest.raises(click.BadParameter, match=r"spark\.KEY=VALUE"):
            _spark_conf((bad,))


def test_conf_is_in_the_help_of_both_jobs() -> None:
    for job in ("ingest", "compact"):
        result = CliRunner().invoke(cli, ["spark", job, "--help"])
        assert result.exit_code == 0 and "--conf" in result.output
