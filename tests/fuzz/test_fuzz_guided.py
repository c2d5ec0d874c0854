"""Coverage-guided fuzzing of the control-message and management-request decoders (issue 17, point 6).

A short run here (``FUZZ_GUIDED_CASES``, default 3000 per decoder); ``benchmarks/fuzz_decoders.py`` runs
100,000 and more. No crash (only the documented exceptions), the corpus reaches code the seeds did not,
and the link-state engine's tables keyed by peer input stay bounded.
"""

from __future__ import annotations

import os
import random

from tests.support.covfuzz import GuidedFuzzer
from tests.support.decoder_targets import ControlTarget, ManagementTarget

CASES = int(os.environ.get("FUZZ_GUIDED_CASES", "3000"))


def _seed() -> int:
    seed = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    print(f"FUZZ_SEED={seed}")
    return seed


def test_control_messages_guided():
    rng = random.Random(_seed())
    target = ControlTarget()
    fuzzer = GuidedFuzzer(target, ControlTarget.seeds(rng), target.cover, target.allowed, rng)
    report = fuzzer.run(CASES, seconds=60)
    print(report.line("control"))
    assert not report.crashes, report.crashes[:3]
    assert report.arcs > report.seed_arcs                  # mutants reached code the seeds did not
    sizes = target.settle()
    assert sizes["scopes"] <= 1024 and sizes["warn"] <= 1024 and sizes["flood"] <= 3, sizes


def test_management_requests_guided():
    rng = random.Random(_seed())
    target = ManagementTarget()
    fuzzer = GuidedFuzzer(target, ManagementTarget.seeds(rng), target.cover, target.allowed, rng)
    report = fuzzer.run(CASES, seconds=60)
    print(report.line("management"), target.statuses)
    assert not report.crashes, report.crashes[:3]
    assert report.arcs > report.seed_arcs
    assert target.statuses.get(200) and target.statuses.get(400)
