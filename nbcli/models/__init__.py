"""nb's reference models, one readable file each (in the spirit of nanoGPT's model.py).

    lm.py        the decoder-only (clm) / masked (mlm) Transformer of `nb train lm`
    seq2seq.py   the encoder-decoder of Vaswani et al. (2017), the papers' translation model
    heads.py     classification and tagging heads on nb's MLM encoder or a transformers encoder
    blocks.py    what lm.py and seq2seq.py share: attention with its KV-cache write, the FFN, positions
    output.py    the float32 output layer logits = h W^T + b (padded on CUDA) and the LM loss on it
    init.py      the papers' initialisation schemes of both models' weight matrices (gpt2, xavier, fairseq)
    masking.py   the masked-LM objective's input corruption (RoBERTa's dynamic masking)
"""
