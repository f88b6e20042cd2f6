"""Costs: the narrow typed interface (:mod:`~nspsim.cost.interface`) that planners, the execution
layer and the simulator depend on, the analytic implementation with one attention-cost file per SP
backend (:mod:`~nspsim.cost.backends`), JSON profile overrides, the communication traffic model and
the tree/iteration-level Load."""
