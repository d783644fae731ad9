"""A line (document) over NB_MAX_LINE_MB, counted in pieces cut where the family's chunk rule cuts.

Encoding a document whole takes about 40 times its size in memory, so a line over the cap is
refused where a tokenizer must see whole documents (no segmenter, `--no-chunked`, JSONL, a stream
that cannot be read again). Where the family has a segmenter (`nbcli.tokenizers.segment`), a
document is counted as the sum of its chunks' counts, and a chunk never spans an ASCII space that
follows a printable ASCII character and precedes an ASCII letter: every family's pattern starts a
chunk at such a space (a run of whitespace after a non-whitespace character), whatever the text on
either side. So the line is read in pieces of PIECE_BYTES, each piece cut at the last such space,
the part before it counted (a continuation is split as the document "x" + part and the chunk of
"x" dropped; refused unless that first chunk is exactly the chunks of "x" alone), the rest carried
into the next piece. Memory stays about the cap; a line with no such space for the cap's length is
refused, as a line read whole would be. The counts equal those of the line counted whole (tests/counting: every family).
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from nbcli.corpus import ByteRange, LineTooLong, read_range_blocks
from nbcli.counting.blocks import BlockCounter, TaskResult
from nbcli.errors import CorpusError
from nbcli.limits import max_line_bytes

PIECE_BYTES = 1 << 20
# A cut: an ASCII space after a printable non-space ASCII byte and before an ASCII letter.
_CUT = re.compile(rb"(?<=[\x21-\x7e]) (?=[A-Za-z])")


def count_range(counter: BlockCounter, rng: ByteRange, result: TaskResult, jsonl: bool = False) -> None:
    """Count the lines of a byte range (`jsonl`: they are JSONL records); a line over NB_MAX_LINE_MB
    is counted in pieces where the family's chunk rule allows it (`count_long_line`), else refused."""
    start = rng.start
    while start < rng.end:
        done = start  # the end of the last block counted
        try:
            for offset, data in read_range_blocks(ByteRange(rng.path, start, rng.end)):
                result.add(counter.count_block(rng.path, data, None, offset, jsonl=jsonl))
                done = offset + len(data)
            return
        except LineTooLong as err:
            if not can_count_in_pieces(counter, err, jsonl):
                raise
            assert err.offset is not None
            if done < err.offset:  # the whole lines read with it, before it
                for offset, data in read_range_blocks(ByteRange(rng.path, done, err.offset)):
                    result.add(counter.count_block(rng.path, data, None, offset, jsonl=jsonl))
            start = count_long_line(counter, err, result)


def can_count_in_pieces(counter: BlockCounter, err: LineTooLong, jsonl: bool) -> bool:
    """Whether `counter` can count the line `err` refused in pieces (see the module doc); never a
    JSONL line (`jsonl`: the file's lines are JSONL records)."""
    return err.offset is not None and counter.segmenter is not None and not counter.certified and not jsonl


def last_cut(data: bytes) -> int:
    """The offset of the last cut in `data` (0 when there is none)."""
    best = 0
    for match in _CUT.finditer(data, max(0, len(data) - PIECE_BYTES)):
        best = match.start()
    if best == 0 and len(data) > PIECE_BYTES:  # none in the last piece: look through the rest
        for match in _CUT.finditer(data):
            best = match.start()
    return best


def count_long_line(counter: BlockCounter, err: LineTooLong, result: TaskResult) -> int:
    """Count the line that begins at `err.offset` in pieces; add it to `result` (one document).
    Returns the file offset just past its newline (or the file's end)."""
    assert err.offset is not None and counter.segmenter is not None
    cap = max_line_bytes()
    counts = result.counts
    carry = b""
    first = True
    bad_utf8 = False
    position = err.offset
    with open(err.path, "rb") as handle:
        handle.seek(position)
        while True:
            piece = handle.read(PIECE_BYTES)
            position += len(piece)
            data = carry + piece
            newline = data.find(b"\n")
            if newline >= 0 or not piece:  # the line ends here
                end = newline if newline >= 0 else len(data)
                part = data[:end]
                part = part[:-1] if part.endswith(b"\r") else part
                bad_utf8 |= _count_part(counter, err, part, first, counts)
                result.bytes_read += end + (1 if newline >= 0 else 0)
                position = position - len(data) + end + (1 if newline >= 0 else 0)
                break
            cut = last_cut(data)
            if cut == 0:
                if len(data) > cap:  # no place to cut within the cap: the line is refused after all
                    raise err
                carry = data
                continue
            bad_utf8 |= _count_part(counter, err, data[:cut], first, counts)
            result.bytes_read += cut
            first, carry = False, data[cut:]
    result.documents += 1
    if bad_utf8:
        result.bad_utf8_lines += 1
    if counter.eos_id is not None:
        counts[counter.eos_id] += 1
    if counter.bos_id is not None:
        counts[counter.bos_id] += 1
    return position


def _count_part(counter: BlockCounter, err: LineTooLong, part: bytes, first: bool, counts: np.ndarray) -> bool:
    """Add the counts of one part of the long line; True if it held invalid UTF-8 (replaced)."""
    assert counter.segmenter is not None
    try:
        text, bad = part.decode("utf-8"), False
    except UnicodeDecodeError as problem:
        if counter.options.strict:
            raise CorpusError(f"{err.path}:{err.line}: invalid UTF-8 near byte {problem.start} of a part of "
                              "the line (--strict)") from None
        text, bad = part.decode("utf-8", errors="replace"), True
    if not text:
        return bad
    if first:
        chunks = counter.segmenter.split([text])
    else:  # a continuation: split as a document "x" + text, whose first chunk is the "x"
        chunks = counter.segmenter.split(["x" + text])
        if chunks[:1] != counter.segmenter.split(["x"]):
            raise err  # "x" did not stay a chunk of its own: no cut here after all, refuse the line
        chunks = chunks[1:]
    block = Counter(chunks)
    keys = list(block)
    counter.add_rows(keys, np.fromiter(block.values(), dtype=np.int64, count=len(keys)), counts,
                     lambda missing: ([keys[i] for i in missing], None))
    return bad
