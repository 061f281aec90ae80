"""The Python reference of the `calls` benchmark (bench/README.md).

What the Python anchor runs: the official MCP SDK (mcp==2.3.0) `MCPServer` over streamable HTTP
in stateless JSON-response mode under uvicorn (one worker, no access log, log level warning),
DNS-rebinding protection on with 127.0.0.1 allowed, and one tool, `get_agent_task(task_id)`,
which reads one row by primary key from a SQLite file (one connection opened at start, WAL) and
returns it as a dict. It takes no key: the anchor has no caller authentication.

`calls` seeds the file and starts this with the interpreter of .tools/oauth-venv
(`bash .ci/install-node-tools` installs it):

    python server.py --port PORT --db PATH
"""

import argparse
import sqlite3
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    args = parser.parse_args()

    # One connection for the process; the SDK runs a synchronous tool on a worker thread.
    db = sqlite3.connect(args.db, check_same_thread=False)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode=WAL")

    server = MCPServer("calls-reference", log_level="WARNING")

    @server.tool()
    def get_agent_task(task_id: str) -> dict[str, Any]:
        """Return one task by id."""
        row = db.execute("SELECT * FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        if row is None:
            raise ValueError(f"AGENT_TASK_NOT_FOUND: no task {task_id}")
        return dict(row)

    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*"],
        allowed_origins=[],
    )
    app = server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        transport_security=security,
        host="127.0.0.1",
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, workers=1, access_log=False, log_level="warning")


if __name__ == "__main__":
    main()
