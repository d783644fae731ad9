"""Remote corpora through fsspec: `hf://datasets/org/name/...`, `s3://...`, `https://...`, and any
other fsspec URL (`memory://`, `file://` in tests). Optional: each protocol names the extra that
installs what it needs, and every failure is one line naming the URL.
"""

from __future__ import annotations

import re
from typing import Any, BinaryIO

from nbcli.errors import InputError

URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
# protocol -> (module fsspec needs for it, the extra that installs it)
EXTRAS = {
    "hf": ("huggingface_hub", "remote"), "http": ("aiohttp", "remote"), "https": ("aiohttp", "remote"),
    "s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
}
REMOTE_BLOCK_BYTES = 8 << 20  # read-ahead of remote files (few round trips per row group)


def is_remote(path: str) -> bool:
    """True for an fsspec URL (`scheme://...`)."""
    return bool(URL.match(path))


def protocol_of(url: str) -> str:
    return url.split("://", 1)[0].lower()


def _missing(url: str, module: str) -> InputError:
    protocol = protocol_of(url)
    extra = EXTRAS.get(protocol, (module, "remote"))[1]
    return InputError(f"{url}: reading {protocol}:// paths needs the {module!r} package: "
                      f"pip install 'nbcli[{extra}]'")


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path within it) of `url`; InputError naming the extra when the protocol's
    package is not installed."""
    try:
        import fsspec
    except ImportError:
        raise _missing(url, "fsspec") from None
    protocol = protocol_of(url)
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as err:
        module = EXTRAS.get(protocol, (getattr(err, "name", None) or str(err).split()[-1],))[0]
        raise _missing(url, module) from None
    except ValueError as err:  # an unknown protocol
        raise InputError(f"{url}: {one_line(err)}") from None
    except Exception as err:  # noqa: BLE001 - a filesystem's constructor may raise anything
        raise unreachable(url, err) from None
    return fs, path


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def unreachable(url: str, err: BaseException) -> InputError:
    return InputError(f"{url}: cannot read the remote file ({type(err).__name__}: {one_line(err)[:300]})")


def expand_remote(url: str, is_corpus_name: Any) -> list[tuple[str, int]]:
    """(URL, size) of the files `url` names: one file, a glob, or a folder walked for corpus files
    (`is_corpus_name(name)`), in sorted order."""
    fs, path = filesystem(url)
    try:
        if any(ch in path for ch in "*?["):
            found = fs.glob(path, detail=True)
            files = {p: info for p, info in found.items() if info.get("type") != "directory"}
            if not files:
                raise InputError(f"{url}: pattern matches no files")
        elif fs.isdir(path):
            files = {p: info for p, info in fs.find(path, detail=True).items()
                     if is_corpus_name(p.rsplit("/", 1)[-1])}
            if not files:
                raise InputError(f"{url}: remote folder has no corpus files")
        else:
            files = {path: fs.info(path)}
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(f"{url}: no such remote file or folder") from None
    except Exception as err:  # noqa: BLE001 - network, auth and protocol errors of any filesystem
        raise unreachable(url, err) from None
    return [(fs.unstrip_protocol(p), int(files[p].get("size") or 0)) for p in sorted(files)]


def open_remote(url: str) -> BinaryIO:
    """A seekable binary file object for a remote file."""
    fs, path = filesystem(url)
    try:
        return fs.open(path, "rb", block_size=REMOTE_BLOCK_BYTES)  # type: ignore[no-any-return]
    except FileNotFoundError:
        raise InputError(f"{url}: no such remote file") from None
    except Exception as err:  # noqa: BLE001
        raise unreachable(url, err) from None
