"""The network edge: sockets, TLS and name resolution (layer L1; may import gevent)."""
