#!/usr/bin/env python3
"""Stand-in channel MCP server (streamable HTTP, /channel) + fake Messages API + control
endpoint, in one process. Logs every HTTP request, JSON-RPC message, stream open/close and
TCP connection open/close with timestamps to DIR/server.jsonl (and a readable DIR/server.log).

usage: servers.py DIR      (writes DIR/ports.json: {"mcp":P1,"api":P2})
control: POST http://127.0.0.1:P1/ctl/send  body = a JSON-RPC notification; it is written
         to every open GET stream of /channel (e.g. a verdict).
Fake model (main-agent requests only, i.e. those offering Bash), from the last user message:
  "go-seq TAG"  -> Bash `touch TAG-1`; its tool result -> Bash `touch TAG-2`; its result -> text
  "go-raw CMD"  -> Bash CMD (verbatim); its result -> text
  "go-agents TAG" -> two Agent tool_use blocks in ONE reply, each subagent told `go-raw touch TAG-a|b`
  "go-par TAG"  -> two Bash tool_use blocks in ONE reply: touch TAG-a, touch TAG-b
  anything else -> text "ok"
"""
import json, os, select, socket, sys, threading, time, uuid, queue
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIR = sys.argv[1]
T0 = time.time()
LOCK = threading.Lock()
JL = open(os.path.join(DIR, "server.jsonl"), "a", buffering=1)
TL = open(os.path.join(DIR, "server.log"), "a", buffering=1)

def log(kind, **kw):
    now = time.time()
    rec = {"t": round(now, 3), "ts": time.strftime("%H:%M:%S", time.localtime(now)) + ("%.3f" % (now % 1))[1:], "kind": kind, **kw}
    with LOCK:
        JL.write(json.dumps(rec) + "\n")
        short = {k: v for k, v in kw.items()}
        TL.write(f"{rec['ts']} {kind} {json.dumps(short)[:1500]}\n")

STREAMS = []          # queues of open GET streams
SESSIONS = set()

# ---------------- fake model state
TOOLS = {}            # tool_use id -> command
NTOOL = [0]

def tool_block(cmd):
    NTOOL[0] += 1
    tid = "toolu_probe%04d" % NTOOL[0]
    TOOLS[tid] = cmd
    return {"type": "tool_use", "id": tid, "name": "Bash",
            "input": {"command": cmd, "description": "probe " + cmd.split()[-1].rsplit('/', 1)[-1]}}

def text_of(msg):
    c = msg.get("content")
    if isinstance(c, str):
        return c
    out = []
    for b in c or []:
        if b.get("type") == "text":
            out.append(b.get("text", ""))
    return "\n".join(out)

def result_text(b):
    c = b.get("content")
    if isinstance(c, str):
        return c
    return "\n".join(x.get("text", "") for x in (c or []) if isinstance(x, dict))

WORK = [None]

HANDLED = {}   # conversation key (its first user message) -> {"directives": n, "results": set()}
AGENT_TOOL = ["Agent"]

def choose(body):
    """Per conversation (main agent or subagent, keyed by its first user message): acts on a
    new go-* directive first, else on the newest not-yet-answered tool results."""
    import re
    tools = body.get("tools") or []
    names = [t.get("name") for t in tools]
    if "Bash" not in names:
        return [{"type": "text", "text": "ok"}], "side"
    for n in ("Agent", "Task"):
        if n in names:
            AGENT_TOOL[0] = n
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    key = json.dumps(users[0].get("content"))[-3000:] if users else ""
    st = HANDLED.setdefault(key, {"directives": 0, "results": set()})
    directives = []
    for m in users:
        directives += re.findall(r"go-(seq|par|raw|agents) ([^\n<]+)", text_of(m))
    if len(directives) > st["directives"]:
        st["directives"] = len(directives)
        kind, arg = directives[-1]
        arg = arg.strip()
        if kind == "raw":
            return [tool_block(arg)], "raw"
        base = os.path.join(WORK[0] or "/tmp", ("seq-" if kind == "seq" else "") + arg)
        if kind == "seq":
            return [tool_block("touch " + base + "-1")], "seq step 1"
        if kind == "agents":
            return [agent_block("go-raw touch " + base + "-a"), agent_block("go-raw touch " + base + "-b")], "agents"
        return [tool_block("touch " + base + "-a"), tool_block("touch " + base + "-b")], "par"
    results = []
    for m in users:
        if isinstance(m.get("content"), list):
            results += [b.get("tool_use_id", "") for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    fresh = [r for r in results if r not in st["results"]]
    if fresh:
        st["results"].update(fresh)
        newest = TOOLS.get(max(fresh), "?")
        if newest.endswith("-1") and "seq-" in newest:
            return [tool_block(newest[:-2] + "-2")], "seq step 2"
        return [{"type": "text", "text": "done after " + ", ".join(TOOLS.get(r, "?") for r in fresh)}], "done"
    return [{"type": "text", "text": "ok"}], "default"

def agent_block(prompt):
    NTOOL[0] += 1
    tid = "toolu_probe%04d" % NTOOL[0]
    TOOLS[tid] = "agent: " + prompt
    return {"type": "tool_use", "id": tid, "name": AGENT_TOOL[0],
            "input": {"description": "probe agent %d" % NTOOL[0], "prompt": prompt, "subagent_type": "general-purpose"}}

NMSG = [0]

def msg_id():
    NMSG[0] += 1
    return "msg_probe%04d" % NMSG[0]

def sse_for(model, blocks):
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    ev = [("message_start", {"type": "message_start", "message": {"id": msg_id(), "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}})]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            ev.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}))
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}}))
        else:
            ev.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}}))
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}}))
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    ev.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}}))
    ev.append(("message_stop", {"type": "message_stop"}))
    return "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in ev), stop


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass

    def setup(self):
        super().setup()
        self.peer = "%s:%d" % self.client_address
        log("tcp_open", server=self.server.name, peer=self.peer)

    def finish(self):
        try:
            super().finish()
        finally:
            log("tcp_close", server=self.server.name, peer=self.peer)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def send(self, code, obj=None, ctype="application/json", headers=None):
        data = b"" if obj is None else (obj if isinstance(obj, bytes) else json.dumps(obj).encode())
        self.send_response(code)
        if obj is not None:
            self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def hdrs(self):
        keep = ("mcp-session-id", "mcp-protocol-version", "accept", "last-event-id", "mcp-method", "mcp-name", "content-type")
        return {k.lower(): v for k, v in self.headers.items() if k.lower() in keep}

    # ---------------- dispatch
    def do_GET(self):
        if self.server.name == "mcp" and self.path.startswith("/channel"):
            return self.mcp_get()
        log("http", server=self.server.name, method="GET", path=self.path, headers=self.hdrs(), peer=self.peer)
        self.send(404, {"error": "not here"})

    def do_DELETE(self):
        log("http", server=self.server.name, method="DELETE", path=self.path, headers=self.hdrs(), peer=self.peer)
        SESSIONS.discard(self.headers.get("Mcp-Session-Id"))
        self.send(200, None)

    def do_POST(self):
        raw = self.body()
        if self.server.name == "api":
            return self.api_post(raw)
        if self.path.startswith("/ctl/mark"):
            log("MARK", what=raw.decode(errors="replace"))
            return self.send(200, {})
        if self.path.startswith("/ctl/send"):
            msg = json.loads(raw)
            log("ctl_send", msg=msg, streams=len(STREAMS))
            for q in list(STREAMS):
                q.put(msg)
            return self.send(200, {"streams": len(STREAMS)})
        try:
            msg = json.loads(raw)
        except Exception:
            msg = raw.decode(errors="replace")
        log("http", server="mcp", method="POST", path=self.path, headers=self.hdrs(), peer=self.peer, body=msg)
        msgs = msg if isinstance(msg, list) else [msg]
        replies = []
        extra = {}
        for m in msgs:
            if not isinstance(m, dict):
                continue
            meth, mid = m.get("method"), m.get("id")
            if meth is not None and mid is None:
                log("rpc_notification", method=meth, params=m.get("params"))
                if meth == "notifications/claude/channel/permission_request":
                    log("PERMISSION_REQUEST", **(m.get("params") or {}))
                continue
            if meth is None:
                log("rpc_response_from_client", msg=m)
                continue
            log("rpc_request", method=meth, id=mid, params=m.get("params"))
            if meth == "server/discover":
                replies.append({"jsonrpc": "2.0", "id": mid, "error": {"code": -32022, "message": "Unsupported protocol version", "data": {"supported": ["2025-11-25"], "requested": "2026-07-28"}}})
            elif meth == "initialize":
                sid = uuid.uuid4().hex
                SESSIONS.add(sid)
                extra["Mcp-Session-Id"] = sid
                pv = (m.get("params") or {}).get("protocolVersion", "2025-11-25")
                if pv > "2025-11-25":
                    pv = "2025-11-25"
                replies.append({"jsonrpc": "2.0", "id": mid, "result": {
                    "protocolVersion": pv,
                    "capabilities": {"tools": {}, "experimental": {"claude/channel": {}, "claude/channel/permission": {}}},
                    "serverInfo": {"name": "probe27", "version": "0.0.1"},
                    "instructions": "Probe server for issue 27. Ignore."}})
            elif meth == "tools/list":
                replies.append({"jsonrpc": "2.0", "id": mid, "result": {"tools": []}})
            elif meth in ("resources/list", "prompts/list", "resources/templates/list"):
                key = {"resources/list": "resources", "prompts/list": "prompts", "resources/templates/list": "resourceTemplates"}[meth]
                replies.append({"jsonrpc": "2.0", "id": mid, "result": {key: []}})
            elif meth == "ping":
                replies.append({"jsonrpc": "2.0", "id": mid, "result": {}})
            else:
                replies.append({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})
        if not replies:
            log("http_reply", code=202)
            return self.send(202, None)
        out = replies if isinstance(msg, list) else replies[0]
        log("http_reply", code=200, body=out, headers=extra)
        self.send(200, out, headers=extra)

    def mcp_get(self):
        log("http", server="mcp", method="GET", path=self.path, headers=self.hdrs(), peer=self.peer)
        if "text/event-stream" not in (self.headers.get("Accept") or ""):
            return self.send(405, None)
        q = queue.Queue()
        STREAMS.append(q)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        log("stream_open", peer=self.peer, session=self.headers.get("Mcp-Session-Id"))
        sock = self.connection
        n = 0
        why = "?"
        try:
            while True:
                r, _, _ = select.select([sock], [], [], 0.2)
                if r:
                    try:
                        d = sock.recv(1, socket.MSG_PEEK)
                    except OSError as e:
                        why = "recv error %r" % e; break
                    if d == b"":
                        why = "client closed (EOF)"; break
                    else:
                        extra = sock.recv(65536)
                        log("stream_unexpected_bytes", data=extra.decode(errors="replace"))
                try:
                    msg = q.get_nowait()
                except queue.Empty:
                    continue
                n += 1
                data = f"id: {n}\nevent: message\ndata: {json.dumps(msg)}\n\n".encode()
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    log("stream_sent", peer=self.peer, msg=msg)
                except OSError as e:
                    why = "write error %r" % e; break
        finally:
            STREAMS.remove(q)
            log("stream_closed", peer=self.peer, why=why)
            self.close_connection = True

    # ---------------- fake Messages API
    def api_post(self, raw):
        try:
            body = json.loads(raw)
        except Exception:
            body = {}
        if "count_tokens" in self.path:
            log("api", path=self.path)
            return self.send(200, {"input_tokens": 10})
        if not self.path.startswith("/v1/messages"):
            log("api_other", path=self.path)
            return self.send(404, {"type": "error", "error": {"type": "not_found_error", "message": "no"}})
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        last = users[-1] if users else {}
        res = []
        if isinstance(last.get("content"), list):
            for b in last["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    res.append({"tool_use_id": b.get("tool_use_id"), "cmd": TOOLS.get(b.get("tool_use_id")), "is_error": b.get("is_error", False), "text": result_text(b)[:300]})
        blocks, rule = choose(body)
        main = any(t.get("name") == "Bash" for t in (body.get("tools") or []))
        if main:
            with open(os.path.join(DIR, "api-bodies.jsonl"), "a") as f:
                f.write(json.dumps({"t": time.time(), "messages": body.get("messages")}) + "\n")
            log("API_MESSAGES", main=main, rule=rule, last_user_text=text_of(last)[-300:], tool_results=res,
                reply=[b.get("text") or {"tool_use": b["id"], "name": b["name"], "input": b["input"]} for b in blocks])
        else:
            log("api_side", rule=rule)
        model = body.get("model", "claude-sonnet-4-5")
        if body.get("stream") is not True:
            stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
            return self.send(200, {"id": msg_id(), "type": "message", "role": "assistant", "model": model, "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}})
        sse, _ = sse_for(model, blocks)
        self.send(200, sse.encode(), ctype="text/event-stream")


def serve(name):
    s = ThreadingHTTPServer(("127.0.0.1", 0), H)
    s.daemon_threads = True
    s.name = name
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s.server_address[1]

if __name__ == "__main__":
    if len(sys.argv) > 2:
        WORK[0] = sys.argv[2]
    ports = {"mcp": serve("mcp"), "api": serve("api"), "pid": os.getpid()}
    with open(os.path.join(DIR, "ports.json"), "w") as f:
        json.dump(ports, f)
    log("start", ports=ports)
    while True:
        time.sleep(3600)
