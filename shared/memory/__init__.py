"""mem7, the memory role: a markdown workspace (the truth), a hash chain over it, a SQLite index beside it."""
