"""The pieces of ``nspsim_runtime.train`` (the entry point stays :mod:`nspsim_runtime.train`), one module per role.

- :mod:`~nspsim_runtime.training.args`: the command line and its resolved, validated :class:`TrainArgs`
  (the workload part is a nested :class:`nspsim.workload.WorkloadConfig`, its flags are nspsim's);
- :mod:`~nspsim_runtime.training.distributed`: this process's place in the world (:class:`Dist`);
- :mod:`~nspsim_runtime.training.plan_ahead`: planning batch ``i + 1`` while batch ``i`` executes;
- :mod:`~nspsim_runtime.training.outputs`: rank 0's step records, printed lines and files;
- :mod:`~nspsim_runtime.training.trainer`: one rank's model, optimizer and executor, and the training loop.

Lower modules never import higher ones (args, distributed < plan_ahead < outputs < trainer).
"""
