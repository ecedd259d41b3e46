"""The process around the gateway: the composition root (app), the ops HTTP server, metrics, logs, upkeep."""
