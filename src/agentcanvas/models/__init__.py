"""Models served by the shared inference server, run batch-invariantly."""
