"""The pieces of ``runtime.train`` (the entry point stays :mod:`runtime.train`), one module per role.

- :mod:`~runtime.training.args`: the command line and its resolved, validated :class:`TrainArgs`
  (the workload part is a nested :class:`nspsim.workload.WorkloadConfig`, its flags are nspsim's);
- :mod:`~runtime.training.distributed`: this process's place in the world (:class:`Dist`);
- :mod:`~runtime.training.plan_ahead`: planning batch ``i + 1`` while batch ``i`` executes;
- :mod:`~runtime.training.outputs`: rank 0's step records, printed lines and files;
- :mod:`~runtime.training.trainer`: one rank's model, optimizer and executor, and the training loop.

Lower modules never import higher ones (args, distributed < plan_ahead < outputs < trainer).
"""
