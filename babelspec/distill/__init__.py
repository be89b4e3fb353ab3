"""Knowledge distillation of drafters from the target (the paper's task and general settings).

``cache``     the teacher's top-k log-probs in resumable, atomically written shards
``teacher``   teacher trajectories (greedy, task mode), scoring, warped held-out distributions
``losses``    the paper's top-k soft cross-entropy, the renormalised KL, expected acceptance
``students``  what is trained: ``self:K`` copies (optionally with a corpus-restricted head) or
              a real small model; what is shared with the target stays frozen
``trainer``   AdamW + cosine warmup + accumulation, checkpoints, exact resume
``pipeline``  one run end to end; ``artifact`` the ``distilled:DIR`` directory format
"""
