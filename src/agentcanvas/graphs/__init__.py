"""Built-in example graphs (JSON files)."""
