"""Keep one `amqp` oslo.messaging driver in a venv: drop meshrouter's entry point where the installed
oslo.messaging still ships its own (14.x and older), so stevedore does not refuse both (MultipleMatches).

    python scripts/oslo-entry-point.py      # run with the venv's interpreter, after installing meshrouter

Prints what it did. With oslo.messaging 15+ (no amqp driver of its own) it changes nothing.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from importlib import metadata


def _drop_stale_stevedore_caches() -> None:
    """Remove this interpreter's stevedore entry-point caches that still list both amqp drivers (a cache
    made before the rewrite, in the same second, keeps its key)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    cache = os.path.join(base, "python-entrypoints")
    if not os.path.isdir(cache):
        return
    for name in os.listdir(cache):
        path = os.path.join(cache, name)
        try:
            data = json.load(open(path))
        except (OSError, ValueError):
            continue
        drivers = data.get("groups", {}).get("oslo.messaging.drivers", [])
        ours = any(v.startswith("router.oslo") for _, v, _ in drivers)
        if data.get("sys.executable") == sys.executable and ours:
            os.remove(path)
            print(f"removed a stale stevedore cache: {path}")


def main() -> int:
    try:
        oslo = metadata.version("oslo.messaging")
    except metadata.PackageNotFoundError:
        print("oslo.messaging not installed: nothing to do")
        return 0
    if int(oslo.split(".")[0]) >= 15:
        print(f"oslo.messaging {oslo}: meshrouter's amqp driver stays registered")
        return 0
    # the venv's dist-info, and the checkout's meshrouter.egg-info (an editable build writes it there; it is
    # a distribution too for a process whose sys.path has the checkout, as pytest's does)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = [d for d in metadata.distributions(path=[*sys.path, repo])
             if (d.metadata["Name"] or "").lower() == "meshrouter"]
    for path in sorted({str(d.locate_file(f"{d._path.name}/entry_points.txt")) for d in found}):  # type: ignore[attr-defined]
        if not os.path.exists(path):
            continue
        lines = open(path).read().splitlines()
        out, skipping = [], False
        for line in lines:
            if line.startswith("["):
                skipping = line.strip() == "[oslo.messaging.drivers]"
            if not skipping:
                out.append(line)
        if out != lines:
            open(path, "w").write("\n".join(out) + "\n")
            print(f"oslo.messaging {oslo} has its own amqp driver: dropped meshrouter's entry point, {path}")
    os.utime(sysconfig.get_paths()["purelib"])      # stevedore's entry-point cache keys on mtimes
    _drop_stale_stevedore_caches()
    return 0


if __name__ == "__main__":
    sys.exit(main())
