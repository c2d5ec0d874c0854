"""Authorization (sans-IO): who may connect, receive from and send to which address, and manage the node.

Decided at Open and at attach (and per message only for the anonymous relay when a policy restricts
targets); the adapter applies the answers. Nothing here touches Proton, a socket or a clock (the log's
rate limit asks a clock the core gives it).

- ``levels``: management access levels (``none`` < ``redacted`` < ``read`` < ``write``).
- ``reserved``: the router's own address space; rules that hold with no policy configured: a reply
  (dynamic) address is consumed only by the link that asked for it, `$management`, `_topo/...` and
  `_local/...` are never consumed by clients; the agent's per-level addresses.
- ``patterns``: `sources` / `targets` patterns (exact, prefix ``a/#``, wildcards ``*`` ``#``, ``${user}``).
- ``hosts``: `remote_hosts` (addresses, CIDR ranges, ``localhost``).
- ``groups``: a vhost's groups and the group of a connection (user, remote host).
- ``access``: what one connection may do (its group with ``${user}`` bound, its link counts).
- ``engine``: the node's policy: Open (vhost, group, connection limits), attach and relay checks, the
  denial counters and the rate-limited log of denials.

Core layer: may import router.addressing, router.config (the `policy:` section's dataclasses), the base
and the standard library; nothing of the adapter, the node or the services.
"""
