"""Frozen, validated specs of what is trained on what: the model, the cluster, the training
settings and the memory model derived from them (B_tok). Model and training presets are plain
functions; cluster presets are TOML files (:mod:`nspsim.specs.clusters`), the schema a user's own
cluster file has."""
