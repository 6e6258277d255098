"""Fine-tuning a checkpoint on real bags, co-trained with sim data (`sim2real finetune`, docs/finetune.md).

episodes.dataset.build_dataset labels real frames with the human's commands; sim_data regenerates
teacher-labelled sim frames of the checkpoint's training distribution; `finetune(checkpoint, bags,
out, FinetuneConfig)` co-trains and writes the new checkpoint with its provenance; judge measures
closed-loop success before and after. Submodules import torch; import them where needed.
"""
