"""The checkpoints of one bench run, each opened once: the position checks, our runner, the engine's draft
preparation (and the conversion it may run) and a server's report all read the same opened target and draft.

Each is opened when first asked for, so a run still refuses in the order its checks come (a draft that is no head
before a target that cannot be read, a missing stored report before either)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..checkpoint.open import InputRef, open_input
from ..draft.load import DraftHead, open_head
from ..mtp import draft as mtp_draft  # noqa: F401  (fills MTP's row in kinds.py: open_head then reads MTP heads)
from ..settings.common import HubOptions


@dataclass
class BenchInputs:
    target_name: str
    draft_name: str | None
    hub: HubOptions = HubOptions()
    # Shared by with_draft's copies: the target, and every draft by name (a reference draft read twice in one run,
    # by the bench and by the context block, is opened once)
    _target: dict[str, InputRef] = field(default_factory=dict, repr=False)
    _drafts: dict[str, InputRef] = field(default_factory=dict, repr=False)

    @property
    def target(self) -> InputRef:
        if not self._target:  # a folder for every bench; the hub options matter only to refuse a repo
            self._target["opened"] = open_input(self.target_name, token=self.hub.token, offline=self.hub.offline,
                                                role="target")
        return self._target["opened"]

    @property
    def draft(self) -> InputRef:
        if self.draft_name not in self._drafts:
            hub = self.hub
            self._drafts[self.draft_name] = open_input(self.draft_name, revision=hub.revision, token=hub.token,
                                                       offline=hub.offline, role="draft")
        return self._drafts[self.draft_name]

    def head(self, target_config: dict, drop: tuple[str, ...] = ()) -> DraftHead:
        """The draft read by its kind's reader (draft.load.open_head), as a draft of a target with that config."""
        return open_head(self.draft.checkpoint, target_config, label=self.draft_name, drop=tuple(drop))

    def with_draft(self, draft_name: str) -> BenchInputs:
        """Another draft on the same opened target (our runner benches the released head beside an engine's)."""
        if draft_name == self.draft_name:
            return self
        return BenchInputs(self.target_name, draft_name, self.hub, self._target, self._drafts)
