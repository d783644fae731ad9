"""The papers' methods on transformers models: in memory, loaded from a folder, and in training.

    output_bias.py  where a model's output bias lives and `install_output_bias` (a Parameter forward
                    adds: the output layer's own bias, BART/Marian's final_logits_bias, or one created
                    on a bias-free nn.Linear); the bias a checkpoint carries (`install_carried_bias`)
    loading.py      the one `from_pretrained` call (nb eval/generate's runner and `load_model`);
                    `load_model`: a folder as transformers loads it, plus its carried output bias;
                    `loaded_names`: the name each checkpoint tensor is loaded under
    inmemory.py     `init_output_bias` (paper 000 sec. 3, sec. 4.1) and `write_into_model`, what
                    `nbcli.patch(model, in_place=True)` does with the surgery plan's tensors
    guidance.py     `attention_guidance_loss` (paper 001, nb train's `Guidance`) on transformers'
                    attention maps or on queries/keys kept by `capture_qk` hooks; `pattern_ids`
    model_card.py   the README.md model card `nb export` writes (huggingface_hub's ModelCard: the Hub's
                    metadata, the run's metrics at the exported step, the papers' arXiv ids, how to load it)
    trainer.py      `AttentionGuidanceTrainer`, a transformers.Trainer with L + alpha_t L_AG (imports
                    transformers at import time: reach it through `nbcli.AttentionGuidanceTrainer`)

The public functions are `nbcli.api.models`'; transformers is imported inside the functions.
"""
