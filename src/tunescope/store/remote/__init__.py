"""The HTTP store: the store contract spoken to a tunescope server.

``_http.py`` is the client side's store, ``_client.py`` its one keep-alive connection
(standard library only), and ``wire.py`` the wire form both sides share: public, as the
server imports it (its table of the calls served, ``CALLS``).
"""
