#!/usr/bin/env python3
"""Coverage-guided fuzzing of the control-message and management-request decoders, at length.

Runs ``tests/support/covfuzz.py`` on each decoder of ``tests/support/decoder_targets.py`` for ``--cases``
mutants (default 100,000 each) and prints, per decoder, cases per second, the corpus, the arcs covered
(seeds alone -> after), crashes (inputs that raised anything but the documented exception), the process's
peak RSS growth and, for the control plane, the link-state engine's tables after the fuzz nodes expired.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/fuzz_decoders.py --cases 100000 [--seed 1]

Writes benchmarks/results/<timestamp>-fuzz-decoders.json; exit status 1 if anything crashed.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import resource
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from tests.support.covfuzz import GuidedFuzzer  # noqa: E402
from tests.support.decoder_targets import ControlTarget, ManagementTarget  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100_000, help="mutants per decoder")
    ap.add_argument("--seed", type=int, default=None, help="random seed (printed when not given)")
    ap.add_argument("--only", choices=("control", "management"), default=None)
    ap.add_argument("--log", action="store_true", help="show the decoders' log lines (many)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if a.log else logging.ERROR)
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"seed {seed}", flush=True)
    results = {"seed": seed, "cases": a.cases}
    failed = False
    for name, cls in (("control", ControlTarget), ("management", ManagementTarget)):
        if a.only and a.only != name:
            continue
        rng = random.Random(seed)
        target = cls()
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        fuzzer = GuidedFuzzer(target, cls.seeds(rng), target.cover, target.allowed, rng)
        report = fuzzer.run(a.cases)
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        extra = target.settle() if name == "control" else target.statuses
        print(report.line(name), f"peak RSS +{(rss1 - rss0) / 1024:.1f} MB", extra, flush=True)
        for data, problem in report.crashes[:5]:
            print(f"  crash: {problem} on {data!r}")
        failed |= bool(report.crashes)
        results[name] = {"cases": report.cases, "seconds": round(report.seconds, 1), "corpus": report.corpus,
                         "seed_arcs": report.seed_arcs, "arcs": report.arcs, "crashes": len(report.crashes),
                         "peak_rss_growth_kb": rss1 - rss0, "extra": {str(k): v for k, v in extra.items()}}
    out = BENCH_DIR / "results" / f"{time.strftime('%Y%m%d-%H%M%S')}-fuzz-decoders.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"Results: {out.relative_to(BENCH_DIR.parent)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
