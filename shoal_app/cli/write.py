"""``shoal write TABLE [FILE|-]``: write JSON lines (one object per line) to a table through the producer.

All-or-nothing per chunk (``--chunk-rows``, default: the whole input is one chunk): every line of a
chunk is parsed and validated before any of it is sent. A bad line is reported with its line number
and column, and nothing of its chunk is sent. ``--delete`` treats each line as a primary key to delete.
Input that is not UTF-8 (or JSON text no encoder can send, such as a lone surrogate escape) is bad
input: one line naming the line, exit code 2, nothing of its chunk sent.
"""

from __future__ import annotations

import json
import math
from typing import IO, Any

import click

from producer import DeliveryReport, Producer, ProducerConfig, RowValidationError
from shoal import jsonio
from shoal.errors import ShoalError
from shoal_app.cli.connection import connection_options, connection_settings
from shoal_app.cli.context import emit, output_option, show
from shoal_app.cli.models import WriteResult
from shoal_app.cli.params import TABLE_NAME, timeout_option


class UndecodableInput(click.ClickException):
    """An input line that is not a JSON object shoal can read (not UTF-8, not JSON, a number out of
    range, nested too deeply): exit code 2, like every other bad input."""

    exit_code = 2


def _decode(number: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.start + 1].hex()
        raise UndecodableInput(f"line {number}: not valid UTF-8 (byte 0x{bad} at byte {exc.start + 1})") from None


class _NumberOutOfRange(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _finite_float(text: str) -> float:
    """A JSON number as a float, refusing one that overflows to an infinity (``1e400``), which
    would be stored as ``inf``; the ``Infinity`` and ``NaN`` constants stay as they are."""
    value = float(text)
    if math.isinf(value):
        raise _NumberOutOfRange(text)
    return value


def _chunks(stream: IO[bytes], chunk_rows: int) -> Any:
    """Yield (rows, line numbers) chunks; raise ClickException on a line that is not a JSON object."""
    rows: list[Any] = []
    lines: list[int] = []
    for number, raw in enumerate(stream, start=1):
        line = _decode(number, raw)
        if not line.strip():
            continue
        try:
            value = jsonio.loads_checked(line, parse_float=_finite_float)
        except jsonio.BadJson as exc:
            raise UndecodableInput(f"line {number}: {exc.reason}") from None
        except _NumberOutOfRange as exc:
            raise UndecodableInput(f"line {number}: the number {exc.text:.60} is beyond a float64's range") from None
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UndecodableInput(
                f"line {number}: not valid Unicode text ({exc.reason}: {exc.object[exc.start : exc.end]!a})"
            ) from None
        if not isinstance(value, dict):
            raise UndecodableInput(f"line {number}: expected a JSON object, got {type(value).__name__}")
        rows.append(value)
        lines.append(number)
        if chunk_rows and len(rows) >= chunk_rows:
            yield rows, lines
            rows, lines = [], []
    if rows:
        yield rows, lines


@click.command("write")
@click.argument("table", type=TABLE_NAME)
@click.argument("file", type=click.File("rb"), default="-")
@click.option("--delete", "delete", is_flag=True, help="Each line is a primary key (a JSON object) to delete.")
@click.option(
    "--chunk-rows",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Validate and send this many lines at a time (0 = the whole input at once).",
)
@click.option("--sync/--no-sync", "do_sync", default=False, help="Wait until the leaders accepted the rows.")
@timeout_option(60.0, "Seconds for flush and sync.")
@output_option
@connection_options
def write_command(
    table: str,
    file: IO[bytes],
    delete: bool,
    chunk_rows: int,
    do_sync: bool,
    timeout: float,
    output: str,
    **conn: Any,
) -> None:
    """Write JSON lines from FILE (or stdin) to TABLE."""
    reports: list[DeliveryReport] = []
    rows_sent = 0
    try:
        config = ProducerConfig(connection_settings(conn))
        with Producer(config, on_delivery=reports.append) as producer:
            try:
                for rows, lines in _chunks(file, chunk_rows):
                    try:
                        result = producer.delete(table, rows) if delete else producer.write(table, rows)
                    except RowValidationError as exc:
                        where = f"line {lines[exc.row]}" if exc.row is not None and exc.row < len(lines) else "input"
                        column = f", column {exc.column!r}" if exc.column else ""
                        sent = (
                            f" ({rows_sent} rows of earlier chunks were sent)" if rows_sent else " (nothing was sent)"
                        )
                        raise click.ClickException(f"{where}{column}: {exc.reason}{sent}") from exc
                    rows_sent += result.rows
            except UndecodableInput as exc:
                sent = f"{rows_sent} rows of earlier chunks were sent" if rows_sent else "nothing was sent"
                raise UndecodableInput(f"{exc.message}; {sent}") from None
            producer.flush(timeout)
            if do_sync:
                producer.sync(timeout)
    except ShoalError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if output == "json":
        emit(
            WriteResult(
                table=table,
                rows=rows_sent,
                batches=len(reports),
                synced=do_sync,
                deliveries=reports,
            )
        )
    else:
        partitions = len({r.partition_id for r in reports})
        verb = "deleted" if delete else "wrote"
        show(
            f"{verb} {rows_sent} rows to {table} in {len(reports)} batch(es) over {partitions} partition(s)"
            + (" (accepted by the leaders)" if do_sync else "")
        )
