"""``python -m agentcanvas.cli`` is the ``agentcanvas`` command."""

from agentcanvas.cli.app import main

raise SystemExit(main())
