"""The benchmarks' shared code: start-up, sampling and reporting; each scenario in benchmarks/ is a short
file on top of it.

* :mod:`harness.paths` – where things are (the repository, benchmarks/build, benchmarks/results, the
  shared router-agnostic harness in /work/shared/bench, qdrouterd when it is built) and :class:`BenchError`;
* :mod:`harness.procs` – free ports, spawning and stopping processes (own session, logs in files), waiting
  for a ready line, a generated node config and one started node;
* :mod:`harness.mesh` – topologies on free ports in the shapes of topologies/, and meshes started the way
  `meshrouter mesh up` does (ready, converged, a route, a node's state line, kill one, stop);
* :mod:`harness.meshruns` – run_bench.py against a mesh: topologies with the command line's overrides,
  waiting for a port, each node's CPU, medians per workload (mesh_bench.py, its scenarios, qdr_compare.py);
* :mod:`harness.routers` – node_bench.py's router under test (our node, the prototype, a URL);
* :mod:`harness.rows` – run_bench.py's results as node_bench.py's summary rows;
* :mod:`harness.fournode` – scale_bench.py's four-node mesh: per node its process, URL, state line; losses;
* :mod:`harness.canary` – a canary RPC stream in a process of its own, its latency over a window;
* :mod:`harness.rawamqp` – raw AMQP frames: Open, a storm of receiver ATTACHes, a drain thread;
* :mod:`harness.sample` – CPU seconds and RSS of a process from /proc, an RSS sampler thread, percentiles
  and medians, the load average;
* :mod:`harness.loadgen` – the C load generator (built into benchmarks/build/amqpbench) and the shared
  orchestrator run_bench.py;
* :mod:`harness.profile` – py-spy flamegraphs and collapsed stacks, the top functions by self time;
* :mod:`harness.trees` – a git revision's tree for before/after runs (``--base REV``);
* :mod:`harness.report` – Markdown tables, where a figure was measured (host, git revision, command, load),
  JSON results under benchmarks/results/.
* :mod:`harness.tables` – BENCHMARKS.md's tables (same titles, columns, row labels) built from the
  scenarios' JSON results, for `make bench`.

Scenarios put ``benchmarks/`` on ``sys.path`` (they run as scripts) and import ``harness.*``.
"""
