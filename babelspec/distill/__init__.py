"""Training drafters from the target: knowledge distillation (the paper's task and general
settings) and n-gram distillation. It drives the target, so it sits above the engine.

``soft_targets``  the teacher's top-k log-probs in resumable, atomically written shards
``teacher``       teacher trajectories (greedy, task mode), scoring, warped held-out distributions
``losses``        the paper's top-k soft cross-entropy, the renormalised KL, expected acceptance
``trainer``       AdamW + cosine warmup + accumulation, checkpoints, exact resume
``evaluate``      held-out KD loss and expected acceptance of a student
``pipeline``      one run end to end, saved as a ``distilled:DIR`` drafter
``ngram``         an n-gram counted from the target's own outputs and distributions

What is trained and its saved form (``self:K`` copies, a corpus-restricted head, a real small
model) live with the drafter that loads them: ``drafters.students`` and ``drafters.artifact``.
"""
