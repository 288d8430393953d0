"""Search strategies: pure, seeded ask/tell state machines (DESIGN 2, layer 2)."""
from .attribution import AttributionStrategy, attribute_factors
from .base import Observation, Strategy, StrategyBase, drive, replay
from .ofat import AddOneInStrategy, LeaveOneOutStrategy
from .screening import ScreeningStrategy, screening_design

__all__ = ["AttributionStrategy", "attribute_factors", "Observation", "Strategy", "StrategyBase",
           "drive", "replay", "LeaveOneOutStrategy", "AddOneInStrategy", "ScreeningStrategy",
           "screening_design"]
