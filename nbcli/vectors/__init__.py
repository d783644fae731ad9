"""Word vectors (paper 002 sec. 5, sec. 6, app. A.2): the one reader of GloVe / word2vec / fastText
files, table 4's transforms (`transforms`) and the word-analogy test (`analogy`).

    reader.py         read_vectors: detects the format (sniff, is_vector_file) and dispatches; WordVectors
    text_format.py    GloVe / word2vec text / fastText .vec lines -> rows
    binary_format.py  word2vec.c binary records -> rows
    stream.py         the decompressed byte stream (compression by magic), with line and byte offsets
    rows.py           what the parsers fill: the kept rows (duplicates, float32 array) and word decoding
    vocabulary.py     vectors against a tokenizer's vocabulary: whole words, a pretrained embedding, a
                      checkpoint's embedding read as word vectors
"""

from nbcli.vectors.reader import WordVectors, read_vectors

__all__ = ["WordVectors", "read_vectors"]
