"""What executing a plan implies, below both planners and simulator: activation memory and the
executor's save/recompute decision, tree-level recompute marks, the phase-streaming issue order, plan
preparation, and the pure token-layout and collective-schedule arithmetic the runtime executes.
Imports specs, cost and plan; never planners, the simulator or the runtime."""
