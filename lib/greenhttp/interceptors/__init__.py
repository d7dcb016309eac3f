"""greenhttp.interceptors (internal)."""
