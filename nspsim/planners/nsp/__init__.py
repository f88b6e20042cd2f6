"""NSP's family: the nested planner and NSP-2L (``planner``), its beam search over the SP tree
(``beam``), the greedy tail (``tail``), the token-balanced routing budget (``token_balance``), the
memory-bound candidates (``route``), the greedy router of the "w/o router" ablation (``greedy``) and an
exhaustive router that checks the beam on small cases (``optimal_router``). docs/planners.md has the
rules and their measured history."""
