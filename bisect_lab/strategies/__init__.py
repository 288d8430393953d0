"""Search strategies: pure, seeded ask/tell state machines (layer 2: no I/O).

``attribute_one_stage`` is one stage of attribution; the staged search that the CLI runs is
``staged.attribute_staged``, exported as ``bisect_lab.attribute_factors``.
"""
from .attribution import AttributionStrategy, attribute_one_stage
from .base import Observation, Strategy, StrategyBase, drive, replay
from .bisection import BisectionStrategy, BisectVerdict, bisect_sequence
from .ofat import AddOneInStrategy, LeaveOneOutStrategy
from .screening import ScreeningStrategy, screening_design

__all__ = ["AttributionStrategy", "attribute_one_stage", "Observation", "Strategy", "StrategyBase",
           "drive", "replay", "BisectionStrategy", "BisectVerdict", "bisect_sequence",
           "LeaveOneOutStrategy", "AddOneInStrategy", "ScreeningStrategy", "screening_design"]
