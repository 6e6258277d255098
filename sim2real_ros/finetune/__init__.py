"""Fine-tuning a checkpoint on real bags: demonstrations and intervention segments (`sim2real finetune`).

`build_dataset(bags, pipeline, joint_names, chunk_length, dt_s, LabelConfig)` labels frames with the
human's commands; `finetune(checkpoint, bags, out, FinetuneConfig)` trains and writes the new
checkpoint with its provenance. Submodules import torch; import them where needed.
"""
