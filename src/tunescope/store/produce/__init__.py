"""The producers' side: what the SDK's flusher and the sampler write, and how it gets there.

``_batch.py`` is the batch, the one unit of writing (its JSON form and checks), ``_writer.py``
the writer that sends batches from its own thread without ever blocking its producer, and
``_spool.py`` the local file it keeps them in while the store is away, and their replay.
Other parts import these through :mod:`tunescope.store`.
"""
