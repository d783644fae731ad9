"""The one way nb reaches a Dask distributed scheduler (`--dask ADDRESS` of count-unigrams,
reproduce and sweep): a client, or a one-line error naming the install or the address."""

from __future__ import annotations

from typing import Any

from nbcli.errors import ConfigError


def connect(address: str) -> Any:
    """A `distributed.Client` of the scheduler at `address` (30 s to connect)."""
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError("--dask needs the 'distributed' package: pip install 'nbcli[dask]'") from None
    try:
        return Client(address, timeout=30)
    except OSError as err:
        raise ConfigError(f"--dask {address}: cannot reach the scheduler ({err})") from None
