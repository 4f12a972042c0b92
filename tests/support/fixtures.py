"""Where the repository's own test data lives: nothing outside the checkout is read."""

from __future__ import annotations

from pathlib import Path

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures"
ACP_SCHEMA_PATH = FIXTURES_DIR / "acp-schema" / "v1" / "schema.json"
PROVIDER_TRANSCRIPTS = FIXTURES_DIR / "providers"
