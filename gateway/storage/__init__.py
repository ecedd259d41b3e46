"""The storage floor: plain SQL and bytes under SessionDB (schema, writer, read queries, write ops
and their typed commit events, FTS, retention, import/export, the home directory). It imports
nothing above it (gateway.errors aside, which imports nothing) and no SDK."""
