"""``python -m router.telemetry DIR NODE PREFIX LIMIT_BYTES``: the telemetry writer's child process."""

import sys

from router.telemetry.child import main

sys.exit(main())
