"""Speculative drafting as one subsystem: the engine holds one Drafter (drafter.py) and calls it once a step.

drafter.py       the interface: open / propose / observe / close, per sequence a proposer and a pacer
pacer.py         how many drafts a sequence proposes and when it rests
ngram.py         prompt lookup over a sequence's own tokens
ngram_table.py   what earlier requests generated, shared by the model's requests
draft_model.py   a small model of the same vocabulary proposing for many sequences in one batched step
"""

from .draft_model import DraftMismatchError, DraftModel, check_draft_vocab
from .drafter import LEARN_PER_STEP, MODES, Drafter, accepted_prefix

__all__ = [
    "LEARN_PER_STEP",
    "MODES",
    "DraftMismatchError",
    "DraftModel",
    "Drafter",
    "accepted_prefix",
    "check_draft_vocab",
]
