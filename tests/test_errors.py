"""nbcli.errors: an error's text is bounded (`shorten`), however much of a hostile file it quotes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nbcli.errors import MAX_MESSAGE, CorpusError, NbError, naming, shorten


@given(st.text(max_size=3 * MAX_MESSAGE), st.integers(40, 2 * MAX_MESSAGE))
def test_shorten_keeps_short_messages_and_the_ends_of_long_ones(message: str, limit: int) -> None:
    short = shorten(message, limit)
    if len(message) <= limit:
        assert short == message
        return
    head, tail = limit * 3 // 4, limit // 4
    assert short.startswith(message[:head]) and short.endswith(message[len(message) - tail:])
    cut = len(message) - head - tail
    assert f" ... [{cut:,} characters cut] ... " in short
    assert len(short) <= limit + 40 < len(message) + 40


def test_an_error_quoting_a_huge_token_is_bounded_and_keeps_where_and_what() -> None:
    """A CoNLL token of 100,000 NUL bytes in an error: str() names FILE:LINE and ends as written; the whole
    text stays in args (was: a 400 KB error line)."""
    message = f"t.conll:3: 1 column(s): the token {chr(0) * 100_000!r} has no tag"
    err = CorpusError(message)
    assert len(str(err)) < MAX_MESSAGE + 40
    assert str(err).startswith("t.conll:3: 1 column(s): the token '\\x00") and str(err).endswith("' has no tag")
    assert err.args[0] == message
    try:
        with naming("--corpus t.conll"):
            raise err
    except NbError as named:
        assert type(named) is CorpusError and str(named).startswith("--corpus t.conll: t.conll:3:")
        assert len(str(named)) < MAX_MESSAGE + 40
