"""Campaigns: the plain functions behind ``run``, ``attribute``, ``bisect`` and ``sweep`` (layer 5).

Every kind opens its campaign through a :class:`Session`, runs the one ask/run/tell loop
(:func:`~bisect_lab.campaigns.drive.drive`) and returns a typed result
(:mod:`bisect_lab.results`). The CLI is a thin args-to-kwargs adapter over these (as in asv);
the pytest plugin and sweeps call them too. They never print: progress and log lines go to
the session's callbacks.
"""
from .attribute import attribute
from .bisect import bisect_commits
from .drive import BalancedRounds, balanced_order, drive
from .recheck import recheck
from .run import measure_arms, run_arms
from .session import Session, resume_option
from .sweep import run_sweep

__all__ = ["Session", "run_arms", "measure_arms", "attribute", "bisect_commits", "run_sweep", "recheck", "drive",
           "BalancedRounds", "balanced_order", "resume_option"]
