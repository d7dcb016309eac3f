"""greenhttp._handlers (internal)."""
