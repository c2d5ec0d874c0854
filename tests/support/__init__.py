"""What the tests share: one implementation of each thing they need, and nothing else.

Tests import from here and from nowhere else under tests/ (tests/unit/test_test_layout.py checks it);
fixtures stay in the conftest.py files and use these modules.

* ``waiting``: waits that keep every open test client running (``wait_for``, ``wait_until``, ...).
* ``clients``: the python-qpid-proton test client, driven by the test (links, trackers, messages).
* ``raw_amqp``: hand-written AMQP frames over a bare socket.
* ``traffic``: paced sends, an audited stream, an RPC echo server, outcome counts.
* ``ports``: free ports, and the ports and URLs a node printed.
* ``nodes``: node configs and processes (start, stop, kill), address rules.
* ``meshes``: meshes of node processes, convergence and address propagation.
* ``state``: a node's tables, mesh view and gateways, read through ``$management``.
* ``management``: a ``$management`` requester on the test client, for tests of the protocol itself.
* ``proxy``: a TCP relay that pauses, blackholes or cuts its connections.
* ``netlab``: nodes in network namespaces wired by veth links.
* ``resources``: memory and CPU of node processes.
* ``telemetry``: telemetry records read back.
* ``meshctl``: ``meshrouter mesh`` on copies of the shipped topologies.
* ``stat_mesh``: the four-node mesh with known traffic of tests/management.
* ``rabbit``: RabbitMQ (pika access, a node's gateway config).
* ``oslo``: oslo.messaging configuration, addresses, endpoints and mesh.
* ``rpc``: ``router.rpc`` objects stopped at a test's end.
* ``pki``, ``security``: test certificates; TLS and SASL clients, the users file.
* ``linkstate_sim``, ``route_reference``: the link-state simulation and its reference routes.
* ``frame_gen``, ``amqp_fuzz``: fuzzing generators and the fuzz client.
* ``analytics_dataset``: the known record set of the analytics tests.
"""
