#!/usr/bin/env python3
"""Condensed timeline of each run under runs/ (or of the run dirs given): driver actions,
permission requests, verdicts, model calls, session/stream/signal events, and Claude Code's
own verdict-matching lines from its debug file."""
import glob, json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
dirs = sys.argv[1:] or sorted(d for d in glob.glob(os.path.join(HERE, "runs", "*-*")) if os.path.isdir(d))
for d in dirs:
    print("=" * 8, os.path.basename(d))
    try:
        recs = [json.loads(l) for l in open(os.path.join(d, "server.jsonl"))]
    except FileNotFoundError:
        continue
    for r in recs:
        k = r["kind"]
        if k == "MARK":
            if r["what"].startswith("observe"):
                continue
            line = "driver: " + r["what"]
        elif k == "PERMISSION_REQUEST":
            line = f"<- permission_request {r['request_id']} {r['description']}"
        elif k == "stream_sent":
            p = r["msg"]["params"]
            line = f"-> verdict {p['request_id']} {p['behavior']}"
        elif k == "API_MESSAGES":
            res = [f"{x['cmd'].rsplit('/', 1)[-1]}{' ERR' if x['is_error'] else ''}" for x in r["tool_results"]][-2:]
            line = f"   model call ({r['rule']}); last results {res}"
        elif k == "http" and r.get("server") == "mcp":
            b = r.get("body")
            m = b.get("method") if isinstance(b, dict) else None
            if m == "notifications/claude/channel/permission_request":
                continue
            line = f"<- HTTP {r['method']} {m or ''}"
        elif k in ("rpc_notification", "rpc_request") and r.get("server") == "stdio":
            if r["method"] == "notifications/claude/channel/permission_request":
                continue
            line = f"<- stdio {r['method']}"
        elif k in ("stream_open", "stream_closed", "STDIO_SIGNAL", "STDIO_EOF", "STDIO_PARENT_GONE", "stdio_exit", "rpc_response_from_client", "stream_unexpected_bytes"):
            line = f"   {k} " + json.dumps({x: y for x, y in r.items() if x not in ("t", "ts", "kind", "peer", "server")})
        else:
            continue
        print(r["ts"], line)
    try:
        for l in open(os.path.join(d, "debug.txt")):
            if "notifications/claude/channel/permission:" in l:
                print("   debug:", l.strip()[11:].split(" [DEBUG] ")[0], l.strip().split('"matrix": ')[-1])
    except FileNotFoundError:
        pass
    a = os.path.join(d, "stdio-alive.txt")
    if os.path.exists(a):
        print("   stdio server last alive:", open(a).read().strip())
