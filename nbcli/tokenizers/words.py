"""Word-level vocabularies built from training data: `-t words:min-freq=K[,lower]` (paper 002 sec. 4 and
app. A.2: "the entire training data is tokenized and the resulting tokens appearing more than a set
minimum frequency ... are added to the vocabulary", the torchtext `build_vocab_from_iterator(min_freq=K)`
practice, i.e. count >= K).

The result is an ordinary Hugging Face `tokenizer.json` (a `WordLevel` model), so nb's one loader,
transformers' `PreTrainedTokenizerFast(tokenizer_file=...)` and the `tokenizers` library load it as
any other:

* **Word rule** (the pre-tokenizer, a `Split` on the regex `\\w+|[^\\w\\s]`, the matches kept): a word
  is a maximal run of word characters (Unicode letters, digits, marks and `_`), and every other
  non-space character is a word of its own; whitespace separates and is dropped. So `don't` is
  `don ' t`, `3.5` is `3 . 5`, `?!` is `? !`. (spaCy's rules are language-specific and need its models;
  this one is fixed, documented and the same in every process that loads the file.)
* **`lower`**: a `Lowercase` normaliser, applied before splitting, both when counting and when
  encoding (GloVe 6B's vectors are lower-cased; 840B's keep case).
* **Vocabulary**: the specials `<unk> <pad> <s> </s>` (ids 0-3, torchtext's order; special tokens),
  then every word counted at least K times in the training data, by count (descending), ties by the
  word's code points (the `tokenizers` library's `WordLevelTrainer`, which does the counting). Other
  words encode as `<unk>`. Decoding joins words with single spaces.

Only the training split is counted (`nb train`: the documents or pairs it trains on, not the ones
held out for validation), read through nb's one corpus reader (`nbcli.corpus`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbcli.errors import TokenizerError

PREFIX = "words:"
SPECIALS = ("<unk>", "<pad>", "<s>", "</s>")
WORD_PATTERN = r"\w+|[^\w\s]"
_SPEC = re.compile(r"^words:min-freq=(\d+)(,lower)?$")
MAX_MIN_FREQ = 2**63 - 1   # the trainer's count type (u64 in tokenizers; i64 keeps it portable)


@dataclass(frozen=True)
class WordsSpec:
    """`words:min-freq=K[,lower]`: keep words counted at least `min_freq` times; lower-case first."""

    min_freq: int
    lower: bool = False

    def __str__(self) -> str:
        return f"{PREFIX}min-freq={self.min_freq}" + (",lower" if self.lower else "")


def is_words_spec(spec: Path | str | None) -> bool:
    """Whether `spec` asks for a word vocabulary built from the training data (`words:...`)."""
    return spec is not None and str(spec).startswith(PREFIX)


def parse_words_spec(spec: Path | str) -> WordsSpec:
    """`words:min-freq=K[,lower]` -> WordsSpec (K >= 1); TokenizerError naming the form otherwise."""
    text = str(spec)
    m = _SPEC.match(text)
    if m is None or not 1 <= int(m.group(1)) <= MAX_MIN_FREQ:
        raise TokenizerError(f"-t {text}: a word vocabulary is written words:min-freq=K or words:min-freq=K,lower "
                             f"(1 <= K <= {MAX_MIN_FREQ}: keep words seen at least K times in the training data)")
    return WordsSpec(int(m.group(1)), bool(m.group(2)))


def _empty_tokenizer(spec: WordsSpec) -> Any:
    """A `tokenizers.Tokenizer` with the word rule and the case rule, no vocabulary yet."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    tok = Tokenizer(models.WordLevel(unk_token=SPECIALS[0]))
    if spec.lower:
        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="removed", invert=True)
    return tok


class NamedTexts:
    """Training texts that know the files they come from (`where`), so that a vocabulary they cannot
    make is an error naming those files."""

    def __init__(self, texts: Iterable[str], where: str) -> None:
        self.texts, self.where = texts, where

    def __iter__(self) -> Iterator[str]:
        return iter(self.texts)


def files_of(paths: Iterable[str]) -> str:
    """`paths` without repeats, in order, joined for an error message (the first 3, then how many more)."""
    unique = list(dict.fromkeys(str(p) for p in paths))
    return ", ".join(unique[:3]) + (f" (and {len(unique) - 3} more)" if len(unique) > 3 else "")


def build_word_tokenizer_json(spec: WordsSpec, texts: Iterable[str]) -> bytes:
    """The tokenizer.json bytes of the word vocabulary of `texts` (module docstring); an error names
    the training files when `texts` is `NamedTexts`."""
    from tokenizers import trainers

    tok = _empty_tokenizer(spec)
    trainer = trainers.WordLevelTrainer(min_frequency=spec.min_freq, special_tokens=list(SPECIALS),
                                        show_progress=False)
    tok.train_from_iterator(texts, trainer)
    if tok.get_vocab_size() <= len(SPECIALS):
        where = getattr(texts, "where", None)
        raise TokenizerError((f"{where}: " if where else "") + f"-t {spec}: no word of the training data occurs "
                             f"{spec.min_freq} time(s) or more, so every word would be <unk>: lower K")
    return tok.to_str(pretty=True).encode("utf-8")


def split_words(text: str, lower: bool = False) -> list[str]:
    """The words of `text` under the word rule (and `lower`), as the built tokenizer sees them."""
    tok = _empty_tokenizer(WordsSpec(1, lower))
    if lower:
        text = tok.normalizer.normalize_str(text)
    return [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(text)]
