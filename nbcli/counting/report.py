"""From a count to its counts file (with provenance) and the summary `nb count-unigrams` prints.

    count_to_file(inputs, tokenizer, output, tsv, options, ...) -> (report, counts)   the whole command
    count_warnings(result, tokenizer)                          what the report's `warnings` say
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nbcli.atomic import write_all_atomic
from nbcli.counting.blocks import CountOptions
from nbcli.counting.run import CountResult, ProgressCallback, count_corpus, throughput
from nbcli.counts import UnigramCounts, counts_file_bytes, counts_tsv, summarize_counts
from nbcli.provenance import tool_version, utc_now
from nbcli.resolve import hub_record
from nbcli.resolve_datasets import dataset_inputs
from nbcli.tokenizers import Tokenizer
from nbcli.tokenizers.identity import identity_metadata


def build_counts_file(result: CountResult, tokenizer: Tokenizer, smoothing_k: float) -> UnigramCounts:
    """Attach provenance metadata (tokenizer sha256 and fingerprint, inputs, options, version, time) to the counts."""
    metadata = {
        "nb.version": tool_version(),
        "nb.created": utc_now(),
        **identity_metadata(tokenizer),  # nb.tokenizer, nb.tokenizer_sha256, nb.tokenizer_fingerprint
        "nb.vocab_size": str(tokenizer.vocab_size),
        "nb.total_tokens": str(result.total_tokens),
        "nb.documents": str(result.documents),
        "nb.bytes_read": str(result.bytes_read),
        "nb.inputs": json.dumps([{"file": s.path, "bytes": s.size, "format": s.format} for s in result.sources]),
        "nb.options": json.dumps({**result.options, "eos": result.eos, "bos": result.bos,
                                  "smoothing": f"add-k:{smoothing_k:g}"}),
        "nb.method": result.method,
        **({"nb.tokenizer_hub": json.dumps(hub)} if (hub := hub_record(tokenizer.path)) else {}),
        **({"nb.datasets": json.dumps(datasets)} if (datasets := counted_datasets(result)) else {}),
        "nb.tokenizer_adjustments": json.dumps(list(tokenizer.adjustments)),
        "nb.bad_utf8_lines": str(result.bad_utf8_lines),
        "nb.skipped_lines": str(result.skipped_lines),
        "nb.skipped_nulls": str(result.skipped_nulls),
    }
    return UnigramCounts(counts=result.counts, metadata=metadata)


def write_count_outputs(counts: UnigramCounts, output: Path, tsv: Path | None, tokenizer: Tokenizer,
                        smoothing_k: float) -> None:
    """Write the counts file (and the TSV) as one commit: both files or neither (nbcli.atomic.OutputSet).
    A TSV named `-` goes to stdout once the counts file is committed (never a file named `-`)."""
    import sys

    outputs = {output: counts_file_bytes(counts)}
    text = counts_tsv(counts.counts, tokenizer.pieces(), smoothing_k) if tsv is not None else None
    if text is not None and not _stdout(tsv):
        outputs[tsv] = text.encode("utf-8")
    write_all_atomic(outputs)
    if text is not None and _stdout(tsv):
        sys.stdout.write(text)
        sys.stdout.flush()


def _stdout(path: Path | None) -> bool:
    return path is not None and str(path) == "-"


def counted_datasets(result: CountResult) -> list[dict[str, Any]]:
    """The Hub datasets the count read (INPUT given as dataset ids): repo, commit, config, split, files."""
    return dataset_inputs([source.origin for source in result.sources])


def count_warnings(result: CountResult, tokenizer: Tokenizer) -> list[str]:
    """What a person should know of a count that succeeded: lines replaced or skipped, nulls
    skipped, an option that did not apply (one line each; the report's `warnings`)."""
    options = result.options
    warnings = []
    if result.bad_utf8_lines:
        warnings.append(f"{result.bad_utf8_lines} line(s) had invalid UTF-8, counted with U+FFFD "
                        "replacement (--strict to fail instead)")
    if result.skipped_lines:
        warnings.append(f"skipped {result.skipped_lines} bad line(s) without a usable --field "
                        f"{options.get('field', 'text')!r} (JSONL, TSV or CSV)")
    if result.skipped_nulls:
        warnings.append(f"skipped {result.skipped_nulls} null document(s) in --field {options.get('field', 'text')!r}")
    if options.get("unigram_certificate") and options.get("chunk_cache", True) \
            and result.method != "chunked (sp-unigram-certified)":
        warnings.append(f"--unigram-certificate applies to SentencePiece unigram models with default settings; "
                        f"{tokenizer.name} was counted by {result.method} "
                        f"({result.method_reason or tokenizer.method_reason})")
    return warnings


def count_report(result: CountResult, tokenizer: Tokenizer, output: Path, tsv: Path | None) -> dict[str, Any]:
    """The summary printed by `nb count-unigrams` (and its --json form)."""
    summary = summarize_counts(result.counts)
    mb_per_s, tokens_per_s = throughput(result)
    return {
        "output": str(output),
        "tsv": str(tsv) if tsv else None,
        "tokenizer": tokenizer.name,
        "tokenizer_sha256": tokenizer.sha256,
        "tokenizer_fingerprint": tokenizer.fingerprint,
        "vocab_size": tokenizer.vocab_size,
        "tokens": summary.total_tokens,
        "documents": result.documents,
        "bytes_read": result.bytes_read,
        "inputs": len(result.sources),
        "formats": sorted({s.format for s in result.sources}),
        "datasets": counted_datasets(result),
        "distinct_types": summary.distinct_types,
        "vocab_coverage": summary.coverage,
        "entropy_nats": summary.entropy_nats,
        "entropy_bits": summary.entropy_bits,
        "top": [{"id": i, "piece": tokenizer.piece(i), "count": c, "share": c / max(1, summary.total_tokens)}
                for i, c in summary.top],
        "eos": result.eos,
        "eos_token": _marker(tokenizer, tokenizer.eos_id),
        "eos_reason": ("--eos/--no-eos" if result.options.get("eos") is not None
                       else tokenizer.eos_default_reason),
        "bos": result.bos,
        "bos_token": _marker(tokenizer, tokenizer.bos_id),
        "tokenizer_adjustments": list(tokenizer.adjustments),
        "method": result.method,
        "method_reason": result.method_reason or tokenizer.method_reason,
        "workers": result.workers,
        "seconds": result.seconds,
        "mb_per_s": mb_per_s,
        "tokens_per_s": tokens_per_s,
        "bad_utf8_lines": result.bad_utf8_lines,
        "skipped_lines": result.skipped_lines,
        "skipped_nulls": result.skipped_nulls,
        "warnings": count_warnings(result, tokenizer),
    }


def _marker(tokenizer: Tokenizer, token_id: int | None) -> dict[str, Any] | None:
    """{"piece", "id"} of a document marker, None when the tokenizer has none."""
    return None if token_id is None else {"piece": tokenizer.piece(token_id), "id": token_id}


def count_to_file(inputs: Sequence[str], tokenizer_path: Path, output: Path, tsv: Path | None, options: CountOptions, *,
                  smoothing_k: float = 1.0, workers: int | None = None, dask_address: str | None = None,
                  progress: ProgressCallback | None = None) -> tuple[dict[str, Any], UnigramCounts]:
    """`nb count-unigrams` from start to end: check the outputs against the inputs and their
    directories (`guard_outputs`, before anything is read), load the tokenizer, count `inputs`
    (files, directories, globs, "-"), write the counts file (and the TSV) as one commit. Returns
    the summary (what `--json` prints) and the counts written."""
    from nbcli.corpus import corpus_files
    from nbcli.outputs import guard_outputs
    from nbcli.tokenizers import load_tokenizer, tokenizer_files

    guard_outputs([output, None if _stdout(tsv) else tsv], [*corpus_files(inputs), *tokenizer_files(tokenizer_path)])
    tokenizer = load_tokenizer(tokenizer_path)
    result = count_corpus(inputs, tokenizer, options, workers=workers, dask_address=dask_address, progress=progress)
    counts = build_counts_file(result, tokenizer, smoothing_k=smoothing_k)
    write_count_outputs(counts, output, tsv, tokenizer, smoothing_k)
    return count_report(result, tokenizer, output, tsv), counts
