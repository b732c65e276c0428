"""The SQL backends: the store contract kept by a SQLite file or a PostgreSQL database.

``_sql.py`` is :class:`SQLStore`, the SQL written once for both: the connection, its
transactions and the schema there, and a mixin per concern beside it, runs and trials
(``_trials.py``), the write of a batch (``_write.py``), series and the reads of their samples
(``_series.py``), appending and packing samples (``_samples.py``), events and scalars
(``_events.py``), the columns they share (``_rows.py``). ``_sqlite.py`` and ``_postgres.py``
are the two dialects and their connections, ``_heal.py`` the one retry of a call whose
connection was lost, ``_schema.py`` the schema and its migrations, ``_pool.py`` a pool of stores
for a server, and the rest what SQL stores offer beyond the contract: pages of events and
scalars (``_pages.py``), rollups and raw retention (``_retention.py``), the usage kept per ended
trial (``_kept_usage.py``) and access tokens (``_tokens.py``). Other parts import these through
:mod:`tunescope.store`.
"""
