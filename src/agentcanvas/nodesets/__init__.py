"""Built-in node sets: each sub-package exposes NODESET."""
