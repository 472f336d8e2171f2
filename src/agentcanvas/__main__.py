"""``python -m agentcanvas`` is the ``agentcanvas`` command."""

from agentcanvas.cli import main

raise SystemExit(main())
