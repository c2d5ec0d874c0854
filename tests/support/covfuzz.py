"""A small coverage-guided fuzzer for the node's in-process decoders (stdlib only).

Inputs that make the target run code it has not run before (new line-to-line arcs, traced with
``sys.settrace`` in the files under ``cover``) join the corpus; every case mutates a corpus entry
(``frame_gen.mutate_body`` / ``mutate``, byte havoc, or a splice of two entries). The target gets the
bytes and must raise only its documented exceptions (``allowed``); anything else is a crash, kept with
its input. Used by ``tests/fuzz/test_fuzz_guided.py`` (a short run) and ``benchmarks/fuzz_decoders.py``
(100,000 cases and more).
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import frame_gen as gen

MAX_CORPUS = 4096
MAX_INPUT = 64 * 1024


@dataclass
class Report:
    """What a run did."""

    cases: int = 0
    seconds: float = 0.0
    corpus: int = 0
    arcs: int = 0                                   # distinct arcs covered in the traced files
    seed_arcs: int = 0                              # of which the seeds alone covered
    crashes: list[tuple[bytes, str]] = field(default_factory=list)

    def line(self, name: str) -> str:
        rate = self.cases / self.seconds if self.seconds else 0.0
        return (f"{name}: {self.cases} cases in {self.seconds:.1f} s ({rate:.0f}/s), corpus {self.corpus}, "
                f"arcs {self.seed_arcs} from the seeds -> {self.arcs}, crashes {len(self.crashes)}")


class GuidedFuzzer:
    """Feeds mutated inputs to `target`, keeping those that reach new code."""

    def __init__(self, target: Callable[[bytes], object], seeds: Iterable[bytes], cover: Iterable[str],
                 allowed: tuple[type[BaseException], ...], rng: random.Random) -> None:
        self.target = target
        self.allowed = allowed
        self.rng = rng
        self.cover = tuple(str(Path(p).resolve()) for p in cover)
        self.arcs: set[tuple[str, int, int]] = set()
        self.corpus: list[bytes] = []
        self._new = 0
        self._prev: dict[int, int] = {}
        self.report = Report()
        for s in seeds:
            if self._run(s):
                self.corpus.append(s)
        if not self.corpus:
            self.corpus = list(seeds) or [b"\x00"]
        self.report.seed_arcs = len(self.arcs)

    # ---- tracing -----------------------------------------------------------------------------------
    def _global(self, frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(self.cover):
            self._prev[id(frame)] = frame.f_code.co_firstlineno
            return self._local
        return None

    def _local(self, frame, event, arg):
        if event == "line":
            key = id(frame)
            arc = (frame.f_code.co_filename, self._prev.get(key, 0), frame.f_lineno)
            if arc not in self.arcs:
                self.arcs.add(arc)
                self._new += 1
            self._prev[key] = frame.f_lineno
        elif event == "return":
            self._prev.pop(id(frame), None)
        return self._local

    def _run(self, data: bytes) -> bool:
        """Run one case; True if it reached new arcs. Records a crash."""
        self._new = 0
        sys.settrace(self._global)
        try:
            self.target(data)
        except self.allowed:
            pass
        except Exception as exc:                    # the contract is broken: keep the input
            self.report.crashes.append((data, f"{type(exc).__name__}: {exc}"))
        finally:
            sys.settrace(None)
            self._prev.clear()
        return self._new > 0

    # ---- mutation ----------------------------------------------------------------------------------
    def _mutant(self) -> bytes:
        rng = self.rng
        data = rng.choice(self.corpus)
        k = rng.random()
        if k < 0.45:
            out = gen.mutate_body(rng, data)
        elif k < 0.7:
            out = gen.mutate(rng, data)
        elif k < 0.85 and len(self.corpus) > 1:     # splice: the head of one, the tail of another
            other = rng.choice(self.corpus)
            out = data[:rng.randint(0, len(data))] + other[rng.randint(0, len(other)):]
        else:                                       # havoc: a few random byte writes
            b = bytearray(data or b"\x00")
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randint(0, 255)
            out = bytes(b)
        return out[:MAX_INPUT]

    def run(self, cases: int, seconds: float | None = None) -> Report:
        """Run `cases` mutants (or until `seconds` have passed)."""
        start = time.monotonic()
        for _ in range(cases):
            data = self._mutant()
            if self._run(data) and len(self.corpus) < MAX_CORPUS:
                self.corpus.append(data)
            self.report.cases += 1
            if seconds is not None and self.report.cases % 256 == 0 and time.monotonic() - start > seconds:
                break
        self.report.seconds += time.monotonic() - start
        self.report.corpus = len(self.corpus)
        self.report.arcs = len(self.arcs)
        return self.report
