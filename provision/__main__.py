"""``python -m provision`` runs the command line."""

from provision.cli import main

raise SystemExit(main())
