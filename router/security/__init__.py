"""Pure parts of transport security: the users file and config-time checks of certificate files.

- ``users``: the hashed users file that SASL PLAIN checks (``meshrouter passwd FILE USER`` writes it);
  pure Python, used by config validation too.
- ``guessing``: per-remote-host tracking of failed logins and fair queueing of password checks.
- ``files``: config-time checks of certificate, key and CA files (Python's ``ssl`` module).

What Proton does with them (TLS domains, the SASL plugin, each listener's and connector's connection
policy) is in the adapter: ``router.adapter.tls``, ``router.adapter.sasl``, ``router.adapter.policy``.
Nothing here imports Proton.

Core layer: may import the base and the standard library only.
"""
