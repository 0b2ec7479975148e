"""Store engines behind the seam in shared/store/db.py (`Database`): PostgreSQL here (postgresql.py); the SQLite engine
stays in shared/store/db.py. Migrations: migrations/NNNN_*.sql (SQLite) and migrations/postgresql/NNNN_*.sql, same
numbers, same tables, columns and keys (tests/postgres/test_schema.py)."""
