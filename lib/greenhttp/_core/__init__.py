"""greenhttp._core (internal)."""
