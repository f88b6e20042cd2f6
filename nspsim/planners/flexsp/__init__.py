"""FlexSP's family: the planner (``planner``: micro-batch counts, the blaster split, a MILP per
micro-batch), the MILP and its HiGHS solve (``milp``, ``highs_solve``), length bucketing
(``bucketing``), the pruning floors (``floor``) and the artifact's own rules (``artifact``).
docs/planners.md compares each stage with the artifact's."""
