"""greenhttp._dispatcher (internal)."""
