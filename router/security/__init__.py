"""Transport security for listeners and connectors: TLS, SASL and the users file.

- ``users``: the hashed users file that SASL PLAIN checks (``meshrouter passwd FILE USER`` writes it);
  pure Python, used by config validation too.
- ``files``: config-time checks of certificate, key and CA files (Python's ``ssl`` module).
- ``sasl``: the node's SASL server mechanisms, plugged into Proton-C per transport.
- ``tls``: Proton SSL domains for listeners and connectors.
- ``policy``: everything a listener or connector applies to each of its connections (TLS, SASL,
  limits).

Only ``sasl``, ``tls`` and ``policy`` import Proton; config checking never does.
"""
