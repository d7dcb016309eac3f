"""greenhttp.cache_stores (internal)."""
