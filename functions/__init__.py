"""The HTTP edge: thin Litestar handlers, one module per endpoint family."""
