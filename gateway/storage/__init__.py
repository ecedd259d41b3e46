"""The storage floor: plain SQL and bytes under SessionDB (schema, writer, read queries, FTS, retention,
import/export, the home directory). It imports nothing above it and no SDK."""
