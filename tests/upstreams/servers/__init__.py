"""Real upstreams for tests: an MCP server on the official SDK and an HTTP backend with an OpenAPI spec."""
