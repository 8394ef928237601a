"""The model: its GGUF file (gguf.py, mapped once, tensors viewed in place), the architecture spec read from it
(architectures/), where its layers run (placement.py), the KV row formats (kv_types.py) and the native step over
all of it (model.py: Model, the facade of native/model.h).

    with GGUFFile(path) as f:
        m = Model(f, n_blocks=256, threads=2)
        logits = m.forward(batch)            # batch: a StepBatch (step_batch.py)
"""
