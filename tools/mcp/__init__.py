"""Tools from MCP servers (DESIGN §15): settings, names, schemas, results, connections, `McpTools`.

Importing this package does not import the `mcp` SDK; `McpTools.start()` does, and only when a
server is enabled (see tools/mcp/toolset.py).
"""

from tools.mcp.results import Attachment, ToolOutcome
from tools.mcp.settings import McpConfigError, McpServerSettings, McpSettings, mcp_settings_from
from tools.mcp.toolset import McpTool, McpTools, ServerState

__all__ = [
    "Attachment",
    "McpConfigError",
    "McpServerSettings",
    "McpSettings",
    "McpTool",
    "McpTools",
    "ServerState",
    "ToolOutcome",
    "mcp_settings_from",
]
