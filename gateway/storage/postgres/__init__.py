"""The PostgreSQL storage backend (DESIGN §14): the same face as gateway/db.py's SessionDB, the same
write ops and typed commit events, over one database that several `chinwag run` replicas share.

Importing this package needs no driver; `gateway.storage.postgres.db` (PostgresSessionDB) needs
psycopg 3 and psycopg_pool (the `postgres` extra).
"""
