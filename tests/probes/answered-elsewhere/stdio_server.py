#!/usr/bin/env python3
"""Stand-in channel MCP server over stdio (newline-delimited JSON-RPC). Logs every message,
stdin EOF and every catchable signal, with timestamps, into DIR/server.jsonl and DIR/server.log
(the same files servers.py writes). usage: stdio_server.py DIR"""
import json, os, signal, sys, time, threading

DIR = sys.argv[1]
JL = open(os.path.join(DIR, "server.jsonl"), "a", buffering=1)
TL = open(os.path.join(DIR, "server.log"), "a", buffering=1)
LOCK = threading.Lock()

def log(kind, **kw):
    now = time.time()
    rec = {"t": round(now, 3), "ts": time.strftime("%H:%M:%S", time.localtime(now)) + ("%.3f" % (now % 1))[1:], "kind": kind, "server": "stdio", **kw}
    with LOCK:
        JL.write(json.dumps(rec) + "\n")
        TL.write(f"{rec['ts']} {kind} {json.dumps(kw)[:1500]}\n")

def on_signal(sig, frame):
    log("STDIO_SIGNAL", signal=signal.Signals(sig).name, ppid=os.getppid())
    # keep running: we want to see what follows (EOF, another signal, SIGKILL)

for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGUSR1):
    signal.signal(s, on_signal)

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
    log("stdio_out", msg=obj)

log("stdio_start", pid=os.getpid(), ppid=os.getppid())

def watch_parent():
    p = os.getppid()
    while True:
        time.sleep(0.2)
        if os.getppid() != p:
            log("STDIO_PARENT_GONE", old=p, new=os.getppid())
            return
threading.Thread(target=watch_parent, daemon=True).start()

def heartbeat():
    # DIR/stdio-alive.txt holds the last instant this process was alive (20 ms resolution):
    # after a SIGKILL it tells when the process died.
    path = os.path.join(DIR, "stdio-alive.txt")
    while True:
        now = time.time()
        with open(path, "w") as f:
            f.write(time.strftime("%H:%M:%S", time.localtime(now)) + ("%.3f" % (now % 1))[1:] + "\n")
        time.sleep(0.02)
threading.Thread(target=heartbeat, daemon=True).start()

for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    try:
        m = json.loads(line)
    except Exception:
        log("stdio_bad", line=line[:500]); continue
    meth, mid = m.get("method"), m.get("id")
    if meth is not None and mid is None:
        log("rpc_notification", method=meth, params=m.get("params"))
        if meth == "notifications/claude/channel/permission_request":
            log("PERMISSION_REQUEST", **(m.get("params") or {}))
        continue
    if meth is None:
        log("rpc_response_from_client", msg=m); continue
    log("rpc_request", method=meth, id=mid, params=m.get("params"))
    if meth == "initialize":
        pv = (m.get("params") or {}).get("protocolVersion", "2025-11-25")
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": min(pv, "2025-11-25"),
              "capabilities": {"tools": {}, "experimental": {"claude/channel": {}, "claude/channel/permission": {}}},
              "serverInfo": {"name": "probe27-stdio", "version": "0.0.1"}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": []}})
    elif meth == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})
log("STDIO_EOF", note="stdin closed")
time.sleep(3)   # stay a little to see whether a signal follows the EOF
log("stdio_exit", why="after EOF")
