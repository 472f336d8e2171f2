"""AgentCanvas Batch Eval: run an agent graph over many episodes, identically at any N."""

__version__ = "0.1.0"
