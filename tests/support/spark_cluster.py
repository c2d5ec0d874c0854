"""A Spark standalone cluster (one master, one worker) on 127.0.0.1, started from pyspark's own
distribution (``$SPARK_HOME/bin/spark-class``; SPARK_HOME is the installed pyspark package): nothing is
downloaded. Used as a context manager, or `start()` / `stop()`; `stop()` kills both JVMs (each runs in
a process group of its own) and is safe to call more than once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.ports import free_ports

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT = 120.0   # a JVM start on a busy two-core machine
REGISTERED = "Successfully registered with master"


def spark_home() -> Path:
    """The pyspark package directory: it carries bin/spark-class and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    """``spark://127.0.0.1:PORT`` with one worker of `cores` cores and `memory` of executor memory."""

    def __init__(self, work: Path, cores: int = 2, memory: str = "2g") -> None:
        self.work = work
        self.cores, self.memory = cores, memory
        self.port, self.master_ui, self.worker_ui, self.worker_port = free_ports(4)
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment for the JVMs and for a driver that talks to them (loopback only; executors run
        this interpreter's Python)."""
        return dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1",
                    SPARK_LOG_DIR=str(self.work / "logs"), SPARK_WORKER_DIR=str(self.work / "worker"),
                    PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)

    def _spawn(self, name: str, *args: str) -> Path:
        log = self.work / f"{name}.log"
        with open(log, "wb") as out:
            self.procs.append(subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=self.env(), cwd=self.work, start_new_session=True))
        self.logs.append(log)
        return log

    def start(self) -> StandaloneCluster:
        """Start the master, then the worker; return once the worker registered (or raise, stopped)."""
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn("master", MASTER, "--host", "127.0.0.1", "--port", str(self.port),
                        "--webui-port", str(self.master_ui))
            log = self._spawn("worker", WORKER, "--host", "127.0.0.1", "--port", str(self.worker_port),
                              "--webui-port", str(self.worker_ui), "--cores", str(self.cores),
                              "--memory", self.memory, "--work-dir", str(self.work / "worker"), self.url)
            deadline = time.monotonic() + START_TIMEOUT
            while REGISTERED not in log.read_text(errors="replace"):
                dead = [p for p in self.procs if p.poll() is not None]
                if dead or time.monotonic() > deadline:
                    why = "a JVM exited" if dead else "timeout"
                    raise RuntimeError(f"Spark standalone cluster did not start ({why}):\n{self.log_tail()}")
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise
        return self

    def log_tail(self, lines: int = 30) -> str:
        """The last `lines` lines of the master's and the worker's logs."""
        tails = []
        for log in self.logs:
            if log.exists():
                last = log.read_text(errors="replace").splitlines()[-lines:]
                tails.append(f"--- {log.name}:\n" + "\n".join(last))
        return "\n".join(tails)

    def stop(self) -> None:
        """Kill the worker and the master (their whole process groups) and reap them."""
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in reversed(self.procs):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(10)
        self.procs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
