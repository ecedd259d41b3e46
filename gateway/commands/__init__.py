"""Chat commands (/new, /resume, /search, ...): parsing, the table, and one module per family."""

from gateway.commands.table import CommandContext, ParsedCommand, command_menu, commands, parse_command, run_command

__all__ = ["CommandContext", "ParsedCommand", "command_menu", "commands", "parse_command", "run_command"]
