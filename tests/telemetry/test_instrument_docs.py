"""Every instrument the code declares is in ``docs/observability.md``'s table, with its unit."""

from __future__ import annotations

from pathlib import Path

from toolprep.runtime.telemetry.instruments import INSTRUMENTS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def test_every_instrument_has_its_row_in_the_docs() -> None:
    rows = [line for line in DOCS.read_text().splitlines() if line.startswith("| `")]
    by_name = {row.split("`")[1]: row for row in rows}
    missing = [spec.name for spec in INSTRUMENTS if spec.name not in by_name]
    assert not missing, f"not in docs/observability.md: {missing}"
    wrong_unit = [s.name for s in INSTRUMENTS if f"| `{s.unit}` |" not in by_name[s.name]]
    assert not wrong_unit, f"documented with another unit: {wrong_unit}"
