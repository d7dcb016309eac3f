"""greenhttp._websocket (internal)."""
