"""The word-analogy test (Mikolov et al. 2013; paper 002 sec. 6 and table 4): 3CosAdd over a
questions-words.txt file, as gensim's `KeyedVectors.evaluate_word_analogies` scores it with its defaults,
so the accuracies are the same:

* the file: `: section` lines start sections; other lines are `a b c d` ("a is to b as c is to d");
  a line that does not split into four words (a blank line too) is skipped and counted in
  `skipped_lines`; a question before any section line is an error (FILE:LINE), as bad UTF-8 is;
* case (`case_sensitive=False`, gensim's case_insensitive=True): words on both sides are compared
  after `str.upper()` (gensim upper-cases; not lower(): 'ß'.upper() is 'SS'), and a word with several
  case variants in the vectors takes the row of the first one in the file;
* `restrict_vocab` (gensim's default 300000; 0: all rows): only the first R rows are candidates, and a
  question with a word outside them is not applicable;
* the answer is argmax_j cos(v_j, b^ + c^ - a^) over the candidates, v^ = v / ||v||, excluding the rows
  of the three question words (and, case-insensitively, all their case variants: gensim skips a
  prediction equal to a question word); a question is correct when the answer's word equals d
  (after upper() when case-insensitive). Zero vectors are never answers.
* counts per section and overall: `total` (four-word lines), `applicable` (all four words among the
  candidates), `correct`, `accuracy` = correct / applicable (table 4's "Total acc.": 1424/1631).

The scores are batched matrix products in float32 (torch): a chunk of questions against a block of
rows at a time, the chunk x block score matrix kept under `budget` floats (default 2^25: 128 MB).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from nbcli.errors import ConfigError, InputError

BUDGET = 1 << 25
RESTRICT_VOCAB = 300000


Question = tuple[int, tuple[str, ...]]
"""(section index, the four words a b c d)."""


@dataclass(frozen=True)
class QuestionSet:
    path: str
    sections: list[str]
    questions: list[Question]
    skipped_lines: int


def read_questions(path: str | os.PathLike[str]) -> QuestionSet:
    """The sections and four-word questions of a questions-words.txt file (module docstring)."""
    from nbcli.limits import input_stat

    path = os.fspath(path)
    input_stat(path, "questions file")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as err:
        raise InputError(f"{path}: cannot read the questions file: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        number = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1)
        raise InputError(f"{path}:{number}: invalid UTF-8 at byte {column} of the line") from None
    sections: list[str] = []
    questions: list[Question] = []
    skipped = 0
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the end of the last line, not a line
    for number, line in enumerate(lines, 1):
        if line.startswith(": "):
            sections.append(line.lstrip(": ").strip())
            continue
        words = line.split()
        if len(words) != 4:
            skipped += 1
            continue
        if not sections:
            raise InputError(f"{path}:{number}: a question before any `: section` line")
        questions.append((len(sections) - 1, tuple(words)))
    if not sections:
        raise InputError(f"{path}: no `: section` line: not a questions-words file")
    return QuestionSet(path, sections, questions, skipped)


def unit_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x / ||x|| row-wise, mask of zero rows); a zero row stays zero (cosine undefined)."""
    norms = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    zero = norms[:, 0] == 0
    return x / torch.where(zero[:, None], torch.ones_like(norms), norms), zero


def three_cos_add(unit: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                  exclude: list[list[int]], barred: torch.Tensor | None = None, budget: int = BUDGET) -> torch.Tensor:
    """3CosAdd (Mikolov et al. 2013): for question q, argmax over rows j of unit[j] . (unit[b_q] +
    unit[c_q] - unit[a_q]), rows in `exclude[q]` and rows where `barred` is True left out. `unit` holds
    unit rows (cosine = dot product); the target's norm does not change the argmax. Chunks of
    questions x blocks of rows keep each score matrix under `budget` entries. Returns int64 [Q]."""
    rows = unit.shape[0]
    n = a.shape[0]
    answers = torch.empty(n, dtype=torch.int64)
    if n == 0:
        return answers
    chunk = max(1, min(n, budget // max(rows, 1), 4096))
    block = max(1, min(rows, budget // chunk))
    penalty = None if barred is None else torch.where(barred, float("-inf"), 0.0).to(unit.dtype)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        target = unit[b[start:stop]] + unit[c[start:stop]] - unit[a[start:stop]]
        q_idx, r_idx = _pairs(exclude[start:stop])
        best = torch.full((stop - start,), float("-inf"), dtype=unit.dtype)
        best_at = torch.zeros(stop - start, dtype=torch.int64)
        for lo in range(0, rows, block):
            hi = min(rows, lo + block)
            scores = target @ unit[lo:hi].T
            if penalty is not None:
                scores += penalty[lo:hi]
            inside = (r_idx >= lo) & (r_idx < hi)
            scores[q_idx[inside], r_idx[inside] - lo] = float("-inf")
            value, where = scores.max(dim=1)
            better = value > best
            best = torch.where(better, value, best)
            best_at = torch.where(better, where + lo, best_at)
        answers[start:stop] = best_at
    return answers


def _pairs(exclude: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    q = [i for i, rows in enumerate(exclude) for _ in rows]
    r = [row for rows in exclude for row in rows]
    return torch.tensor(q, dtype=torch.int64), torch.tensor(r, dtype=torch.int64)


def _key(word: str, case_sensitive: bool) -> str:
    return word if case_sensitive else word.upper()


def score_analogies(words: list[str], x: torch.Tensor, questions: QuestionSet, *, case_sensitive: bool = False,
                    restrict_vocab: int = RESTRICT_VOCAB, budget: int = BUDGET) -> dict[str, Any]:
    """Per-section and overall counts of 3CosAdd on the rows `x` of `words` (module docstring)."""
    if restrict_vocab < 0:
        raise ConfigError(f"--restrict-vocab must be >= 0 (0: all rows), got {restrict_vocab}")
    limit = len(words) if restrict_vocab == 0 else min(restrict_vocab, len(words))
    first: dict[str, int] = {}
    variants: dict[str, list[int]] = {}
    for i in range(limit):
        key = _key(words[i], case_sensitive)
        first.setdefault(key, i)
        variants.setdefault(key, []).append(i)
    unit, zero = unit_rows(x[:limit].to(torch.float32))
    applicable: list[Question] = []
    keys: list[tuple[str, ...]] = []
    for q in questions.questions:
        k = q[1] if case_sensitive else tuple(w.upper() for w in q[1])
        if k[0] in first and k[1] in first and k[2] in first and k[3] in first:
            applicable.append(q)
            keys.append(k)
    a = torch.tensor([first[k[0]] for k in keys], dtype=torch.int64)
    b = torch.tensor([first[k[1]] for k in keys], dtype=torch.int64)
    c = torch.tensor([first[k[2]] for k in keys], dtype=torch.int64)
    exclude = [sorted({*variants[k[0]], *variants[k[1]], *variants[k[2]]}) for k in keys]
    answers = three_cos_add(unit, a, b, c, exclude, zero if bool(zero.any()) else None, budget).tolist()
    counts = [{"section": name, "correct": 0, "applicable": 0, "total": 0} for name in questions.sections]
    examples: list[dict[str, Any]] = []
    for q in questions.questions:
        counts[q[0]]["total"] += 1
    for q, k, answer in zip(applicable, keys, answers):
        row = counts[q[0]]
        row["applicable"] += 1
        hit = _key(words[answer], case_sensitive) == k[3]
        row["correct"] += int(hit)
        if not hit and len(examples) < 10:
            examples.append({"question": list(q[1]), "answer": words[answer]})
    overall = {"section": "overall", **{f: sum(r[f] for r in counts) for f in ("correct", "applicable", "total")}}
    for row in (*counts, overall):
        row["accuracy"] = row["correct"] / row["applicable"] if row["applicable"] else None
    return {"sections": counts, "overall": overall, "candidates": limit, "zero_rows": int(zero.sum()),
            "wrong_examples": examples}


def analogy_report(vectors: str | os.PathLike[str], questions: str | os.PathLike[str], *,
                   transforms: tuple[str, ...] = (), positions: Any = None, case_sensitive: bool = False,
                   restrict_vocab: int = RESTRICT_VOCAB, limit: int | None = None, format: Any = "auto",
                   duplicates: Any = "error", vocabulary: str | os.PathLike[str] | None = None,
                   budget: int = BUDGET, tokenizer: str | os.PathLike[str] | None = None,
                   unicode_errors: Any = None) -> dict[str, Any]:
    """The `nb analogy` report: read the questions and the vectors, apply `transforms` in order
    (nbcli.vectors.transforms) to all rows kept (`vocabulary`: a word-list file), score 3CosAdd.

    `vectors` that are no word-vector file (`is_vector_file`) are a checkpoint, a model folder, a Hub
    repo id or an nb run: its input embedding's whole-word rows under `tokenizer` (default: the one
    beside the model), in id order (`nbcli.vectors.vocabulary.checkpoint_vectors`)."""
    from nbcli.errors import naming
    from nbcli.vectors.reader import escaped_note, is_vector_file, read_vectors, read_word_list
    from nbcli.vectors.transforms import Positions, transform_chain
    from nbcli.vectors.vocabulary import checkpoint_vectors, restricted

    positions = positions or Positions()
    qs = read_questions(questions)  # first: a bad questions file fails before a 5 GB read
    keep = None if vocabulary is None else read_word_list(vocabulary)
    if is_vector_file(vectors):
        if tokenizer is not None:
            raise ConfigError(f"-t/--tokenizer applies to a checkpoint's embedding; {os.fspath(vectors)} holds word "
                              "vectors")
        wv = read_vectors(vectors, format=format, limit=limit, duplicates=duplicates, vocabulary=keep,
                          unicode_errors=unicode_errors)
    else:
        wv = restricted(checkpoint_vectors(vectors, tokenizer), keep, limit)
    x = torch.from_numpy(wv.vectors)
    with naming(f"{wv.path}"):
        chain = transform_chain(x, transforms, positions)
    if chain:
        x = chain[-1][1]
    scores = score_analogies(wv.words, x, qs, case_sensitive=case_sensitive, restrict_vocab=restrict_vocab,
                             budget=budget)
    warnings = []
    if qs.skipped_lines:
        warnings.append(f"{qs.path}: {qs.skipped_lines} line(s) without four words skipped (as gensim does)")
    if wv.duplicates_skipped:
        warnings.append(f"{wv.path}: {wv.duplicates_skipped} duplicate word(s) skipped (the first row kept)")
    if wv.escaped_words:
        warnings.append(escaped_note(wv))
    return {"vectors": wv.summary(), "vocabulary": None if vocabulary is None else os.fspath(vocabulary),
            "vocabulary_words": None if keep is None else len(set(keep)), "questions": qs.path, "transforms": list(transforms),
            "positions": positions.as_dict() if any(t.startswith("pos-enc") for t in transforms) else None,
            "case_sensitive": case_sensitive, "restrict_vocab": restrict_vocab, "method": "3CosAdd",
            **scores, "skipped_lines": qs.skipped_lines, "warnings": warnings}

