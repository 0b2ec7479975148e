"""The mesh as an MCP server: wire types, the transport-independent dispatcher, sessions, stdio."""
