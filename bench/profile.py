#!/usr/bin/env python3
"""Where a tool call's CPU goes, from a perf profile of the front or the bridge under `calls`.

    perf record -e cpu-clock -F 2000 --call-graph dwarf,32768 -p PID -o p.data -- sleep 5
    perf script -i p.data | inferno-collapse-perf > p.folded        # cargo install inferno
    bench/profile.py front|bridge p.folded CPU_US_PER_CALL

Each sampled stack goes to the first category, in the order below, that one of its frames
matches; the table gives each category's share of the process's samples and that share of its
CPU per call (the figure `calls` measured in the same run). bench/README.md keeps the tables.
"""

import collections
import re
import sys

SCHEDULING = ("scheduling: thread switches and idle wake-ups",
              r"finish_task_switch|schedule_hrtimeout|__schedule|futex_wait|futex_wake|try_to_wake_up")

FRONT = [
    SCHEDULING,
    ("JSON: the bridge's answer read and the MCP answer written",
     r"Response::parse|parse_raw|CallToolResult|serde_json::ser|to_vec|spliced|format_escaped|message_response"
     r"|tool_result|structured|ServerJsonRpcMessage"),
    ("the bridge call (socket I/O, request line)", r"bridge_proto::client|Request::line|unix_stream"),
    ("JSON: the request body read (and rmcp's own reading)",
     r"ClientJsonRpcMessage|direct::plain|PlainCall|serde_json::de|from_slice|Deserialize"),
    ("rmcp's per-request service (a service, channels and tasks per POST)", r"rmcp::"),
    ("HTTP and TCP (hyper, bridge-httpd, the kernel's TCP)",
     r"hyper::|bridge_httpd|tcp_|__tcp|ip_|inet_|sock_|skb|net_rx|__netif|process_backlog|do_softirq"
     r"|sys_recvfrom|writev|sys_write|sys_read|epoll"),
]

BRIDGE = [
    SCHEDULING,
    ("the audit writer (rows, keys' last use, commits)", r"registry::audit::writer|write_audit|insert_audit|touch_keys"),
    ("SQLite: the task's rows read",
     r"sqlite3|rusqlite|task_from_row|get_task|task_parts|plan_of_task|get_interaction|get_changes"),
    ("the task view built and written (JSON)",
     r"task_view|tasks::views|ok_line|to_line|serde_json::ser|format_escaped|rfc3339|humantime"),
    ("the request line read", r"Request::parse|IncomingRequest::parse|conn::params|serde_json::de|from_value"),
    ("registry: key check, policy, validation, audit row",
     r"registry::auth|KeyCache|Registry::(call|finish|audit_row|call_inner)|args::validate|policy::|audit_row"
     r"|AuditSink::record|hash_secret|sha2"),
    ("socket I/O (the Unix socket, its framing)", r"read_line|unix_stream|sys_write|sys_read|write_all|epoll|slots"),
    ("the store hop (tokio's blocking pool, or the store's threads)",
     r"blocking::pool|spawn_blocking|store::workers|Condvar|oneshot"),
]

OTHER = "the rest (tokio's task scheduling, timers, allocation outside the above)"


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("front", "bridge"):
        sys.exit(__doc__)
    rules = FRONT if sys.argv[1] == "front" else BRIDGE
    per_call = float(sys.argv[3])
    samples = collections.Counter()
    total = 0
    with open(sys.argv[2]) as folded:
        for line in folded:
            stack, _, count = line.rstrip().rpartition(" ")
            if not stack:
                continue
            count = int(count)
            total += count
            frames = stack.split(";")
            name = next((n for n, rx in rules if any(re.search(rx, f) for f in frames)), OTHER)
            samples[name] += count
    if not total:
        sys.exit("no samples in " + sys.argv[2])
    print("| where | share | µs per call |")
    print("|---|---:|---:|")
    for name, count in samples.most_common():
        print(f"| {name} | {100 * count / total:.0f} % | {per_call * count / total:.1f} |")


if __name__ == "__main__":
    main()
