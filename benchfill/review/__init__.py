"""Human review of proposed items: the queue, decisions, the release rule, the review page.

Library face (the CLI is a thin layer over these):

- ``ReviewBoard(run_dir, rule)``: the run's queue and store; ``decide()`` records a decision.
- ``export_queue(run_dir, out_dir)`` / ``import_decisions(run_dir, csv_file)``: the spreadsheet path.
- ``ReleaseRule(min_accepts, max_rejects)`` and ``Outcome``: which items a release takes.
- ``serve(run_dir, port, rule)`` / ``ReviewServer``: the local review page (``benchfill.review.server``).
"""

from __future__ import annotations

from benchfill.review.board import DECISIONS, ReviewBoard
from benchfill.review.export import export_queue, import_decisions, review_record
from benchfill.review.queue import QueueEntry, load_queue, marked_diff, text_diff
from benchfill.review.rule import Outcome, ReleaseRule, outcome

__all__ = [
    "DECISIONS",
    "Outcome",
    "QueueEntry",
    "ReleaseRule",
    "ReviewBoard",
    "export_queue",
    "import_decisions",
    "load_queue",
    "marked_diff",
    "outcome",
    "review_record",
    "text_diff",
]
