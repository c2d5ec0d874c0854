"""Keep one `amqp` oslo.messaging driver in a venv: drop meshrouter's entry point where the installed
oslo.messaging still ships its own (14.x and older), so stevedore does not refuse both (MultipleMatches).

    python scripts/oslo-entry-point.py      # run with the venv's interpreter, after installing meshrouter

Prints what it did. With oslo.messaging 15+ (no amqp driver of its own) it changes nothing.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from importlib import metadata


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
    found = [d for d in metadata.distributions() if (d.metadata["Name"] or "").lower() == "meshrouter"]
    for dist in found:
        path = dist.locate_file(f"{dist._path.name}/entry_points.txt")      # type: ignore[attr-defined]
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
    os.utime(sysconfig.get_paths()["purelib"])      # stevedore's entry-point cache keys on this mtime
    return 0


if __name__ == "__main__":
    sys.exit(main())
