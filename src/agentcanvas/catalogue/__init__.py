"""The catalogue: which node sets and graphs exist (discovery, manifests, validation).

The bottom of the hosting stack: it imports the node API and the graph model, never a
server. See docs/architecture.md.
"""

from agentcanvas.catalogue.catalogue import ACTIVE_WORKSPACE_ENV, NodeSetCatalogue
from agentcanvas.catalogue.discovery import Found

__all__ = ["ACTIVE_WORKSPACE_ENV", "Found", "NodeSetCatalogue"]
