"""What a run is called when nobody names it, and where the page shows a run: each written once.

A run nobody names is named by what made it and when (:func:`default_run_name`: the SDK's
``run-…``, ``tunescope run``'s command, ``load-…``, ``demo-…``, an importer's tool). The page
(``web/src/route.ts``) shows a run's Resource Utilization tab at a hash route
(:func:`page_link`), and a team server serves it at the root of its address
(:func:`page_root`): ``tunescope ui`` prints the link, a run's first line on stderr names the
page, and the tracker integrations link a trial's page.

This is a leaf: it imports nothing of ours.
"""

from __future__ import annotations

import time
from urllib.parse import quote, urlencode, urlsplit

__all__ = ["RUN_STAMP", "default_run_name", "page_link", "page_root"]

RUN_STAMP = "%Y%m%d-%H%M%S"
"""The ``time.strftime`` form of the time in a default run name (local time)."""


def default_run_name(prefix: str, stamp: str | None = None) -> str:
    """``PREFIX-YYYYMMDD-HHMMSS``, the local time now (:data:`RUN_STAMP`), or ``PREFIX-STAMP``
    when something else identifies the run (a multi-node job's id)."""
    return f"{prefix}-{time.strftime(RUN_STAMP) if stamp is None else stamp}"


def page_root(store_url: str) -> str | None:
    """``scheme://host[:port]`` of the team server an HTTP store URL names, whose page is at
    the root of that address (credentials left out, the scheme in lower case); None for any
    other store."""
    parts = urlsplit(store_url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{scheme}://{parts.netloc.rpartition('@')[2]}"


def page_link(base: str, run: int | str, trial: int | None = None) -> str:
    """The Resource Utilization tab of ``run`` (its id or its name) on the page at ``base``,
    showing ``trial`` (its id) when given."""
    link = f"{base.rstrip('/')}/#/runs/{quote(str(run), safe='')}/resources"
    return link if trial is None else f"{link}?{urlencode({'trial': trial})}"
