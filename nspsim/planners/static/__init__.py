"""Static SP: one degree for the whole batch, samples packed by cost-model load or, as the paper's
baseline, by tokens (``token_packing``); NSP and BASP reuse its packing as seeds."""
