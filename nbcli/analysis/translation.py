"""Translation metrics: corpus BLEU and chrF from sacreBLEU, with their signatures.

Paper 000 sec. 4.1 and app. A: "All BLEU and chrF scores are computed using the sacreBLEU library"
(Post, 2018). sacreBLEU is the field's reference implementation: it tokenises the references itself
(13a by default), so scores of detokenised output are comparable across papers, and its signature
(`nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`) records every setting that changes a
score. nb reports the signature beside every score and never computes BLEU another way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nbcli.errors import InputError

#: sacreBLEU's BLEU tokenisers that need nothing beyond sacreBLEU itself (no download, no MeCab):
#: 13a, the default (WMT's mteval-v13a); intl (Unicode punctuation); zh; char; none.
BLEU_TOKENIZERS = ("13a", "intl", "zh", "char", "none")


def score_translations(hyps: Sequence[str], refs: Sequence[str], *, tokenize: str = "13a",
                       lowercase: bool = False) -> dict[str, Any]:
    """Corpus BLEU and chrF of hypotheses `hyps` against one reference each (`refs`, same order),
    both from sacreBLEU with its defaults unless `tokenize`/`lowercase` say otherwise (BLEU's
    tokeniser and case; chrF is character-based: chrF2, n-gram order 6, no word n-grams).

    Returns {"sentences", "bleu", "chrf", "bleu_signature", "chrf_signature", "bleu_details"}:
    scores on sacreBLEU's 0-100 scale; `bleu_details` holds the n-gram precisions, brevity penalty,
    length ratio and hypothesis/reference lengths behind the BLEU score. InputError when the two
    lists differ in length or are empty (a hypothesis may be empty: a model can output nothing)."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hyps) != len(refs):
        raise InputError(f"{len(hyps)} hypotheses for {len(refs)} references: one hypothesis a reference, "
                         "in the same order")
    if not refs:
        raise InputError("no sentences to score")
    if tokenize not in BLEU_TOKENIZERS:
        raise InputError(f"BLEU tokenizer {tokenize!r}: expected one of {', '.join(BLEU_TOKENIZERS)}")
    hyps, refs = [str(h) for h in hyps], [str(r) for r in refs]
    bleu_metric, chrf_metric = BLEU(tokenize=tokenize, lowercase=lowercase), CHRF()
    bleu = bleu_metric.corpus_score(hyps, [refs])
    chrf = chrf_metric.corpus_score(hyps, [refs])
    return {
        "sentences": len(refs),
        "bleu": float(bleu.score),
        "chrf": float(chrf.score),
        "bleu_signature": str(bleu_metric.get_signature()),
        "chrf_signature": str(chrf_metric.get_signature()),
        "bleu_details": {"precisions": [float(p) for p in bleu.precisions], "brevity_penalty": float(bleu.bp),
                         "ratio": float(bleu.sys_len / bleu.ref_len) if bleu.ref_len else None,
                         "hyp_len": int(bleu.sys_len), "ref_len": int(bleu.ref_len)},
    }
