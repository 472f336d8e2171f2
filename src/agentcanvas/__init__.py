"""AgentCanvas Batch Eval: run an agent graph over many episodes, bit-identically at any worker count."""

__version__ = "0.1.0"
