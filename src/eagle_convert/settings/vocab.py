"""The options of `vocab-map` that name the vocabulary rules: whose counting rules (--compat) and which map file
format (--format, --from), declared once over vocab/rules.py's tables (each subcommand says what they mean there)."""

from __future__ import annotations

import click

from ..vocab.rules import COMPATS, FORMAT_NAMES
from .declare import flag

COMPAT = flag("--compat", type=click.Choice(COMPATS))
FORMAT = flag("--format", param="fmt", type=click.Choice(list(FORMAT_NAMES)))
FROM_FORMAT = flag("--from", param="from_format", type=click.Choice(list(FORMAT_NAMES)))
