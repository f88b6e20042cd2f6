"""Planning across a gradient-accumulation window: candidate assignments (:mod:`.assign`) routed by any
step planner and chosen by estimate or a judge (:mod:`.planner`); the contract is
:class:`nspsim.plan.window.WindowPlan`."""

from nspsim.planners.window.assign import CANDIDATES
from nspsim.planners.window.planner import WindowPlanner, plan_estimate

__all__ = ["CANDIDATES", "WindowPlanner", "plan_estimate"]
