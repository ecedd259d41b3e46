"""One message's way through the daemon: the runner, per-chat lanes, agent turns and the agent cache."""
