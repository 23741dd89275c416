"""The one refusal for a family eagle-convert names but does not convert: which family, and how to serve it as it is."""

from __future__ import annotations

from ..errors import UnsupportedConversionError
from .family_table import DraftFamily, family_of


def family_refusal(family: DraftFamily, label: str) -> UnsupportedConversionError:
    return UnsupportedConversionError(
        f"{label} is {family.title}: serve it as it is with {', '.join(family.engines)}; eagle-convert does not "
        f"convert it{family.why}.",
        "Point the engine at the checkpoint as it is and name the method explicitly (an engine left to guess it from "
        "the path can misroute the head silently); eagle-convert converts EAGLE-1, EAGLE-3 and DFlash heads and "
        "extracts the MTP layers of the families in docs/mtp.md.")


def refuse_family(config: dict, names, label: str) -> DraftFamily | None:
    """Raise the refusal when the checkpoint is a family eagle-convert does not convert; the family (or None)
    otherwise."""
    family = family_of(config, names)
    if family is not None and family.converts is None:
        raise family_refusal(family, label)
    return family
