"""Allow `python -m router ...`."""

from router.cli import main

raise SystemExit(main())
