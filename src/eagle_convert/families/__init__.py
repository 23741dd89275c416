"""The draft families eagle-convert names but does not (all) convert: what each looks like, which engines load it as
it is and under which method name (family_table.py, data), and the one refusal that says so (family_refusal.py)."""

from .family_refusal import family_refusal, refuse_family
from .family_table import BY_NAME, FAMILIES, DraftFamily, family_of

__all__ = ["BY_NAME", "FAMILIES", "DraftFamily", "family_of", "family_refusal", "refuse_family"]
