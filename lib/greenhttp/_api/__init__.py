"""greenhttp._api (internal)."""
