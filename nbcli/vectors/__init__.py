"""Word vectors (paper 002 sec. 5, sec. 6, app. A.2): the one reader of GloVe / word2vec / fastText
files (`reader`), table 4's transforms (`transforms`) and the word-analogy test (`analogy`)."""

from nbcli.vectors.reader import WordVectors, read_vectors

__all__ = ["WordVectors", "read_vectors"]
