#!/usr/bin/env python3
"""Driver: real Claude Code 2.1.332 in tmux against servers.py (stand-in channel + fake API).

usage: nice -n 10 python3 probe.py SCENARIO...   (or `all`); list: python3 probe.py list
Each scenario gets runs/<stamp>-<name>/ with server.log/.jsonl (the timeline, with MARK lines
for every driver action), debug.txt (Claude Code --debug-file), screen-*.txt.
"""
import json, os, shutil, subprocess, sys, time, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ELF = os.environ.get("CLAUDE_ELF", os.path.expanduser(
    "~/.cache/matrix-channel/claude-code-2.1.332/node_modules/@anthropic-ai/claude-code-linux-x64/claude"))
KEY = "sk-ant-api03-probe27-0000000000000000000000000000000000000000"


class Run:
    def __init__(self, name, stdio=False):
        self.stdio = stdio
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.dir = os.path.join(HERE, "runs", f"{stamp}-{name}")
        self.home = os.path.join(self.dir, "home")
        self.work = os.path.join(self.dir, "work")
        os.makedirs(os.path.join(self.home, ".claude"))
        os.makedirs(self.work)
        self.sock = os.path.join(self.dir, "tmux.sock")
        self.srv = subprocess.Popen(["python3", os.path.join(HERE, "servers.py"), self.dir, self.work])
        for _ in range(100):
            if os.path.exists(os.path.join(self.dir, "ports.json")):
                break
            time.sleep(0.05)
        time.sleep(0.1)
        self.ports = json.load(open(os.path.join(self.dir, "ports.json")))
        self.url = f"http://127.0.0.1:{self.ports['mcp']}/channel"
        self.env = {
            "HOME": self.home, "CLAUDE_CONFIG_DIR": os.path.join(self.home, ".claude"),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "xterm-256color", "LANG": "C.UTF-8",
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{self.ports['api']}", "ANTHROPIC_API_KEY": KEY,
            "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1", "ENABLE_TOOL_SEARCH": "false",
            "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF": "1",
        }
        self.nperm_seen = 0

    # ---- plumbing
    def mark(self, what):
        print(time.strftime("%H:%M:%S"), "MARK", what, flush=True)
        self.ctl("/ctl/mark", what.encode())

    def ctl(self, path, data):
        req = urllib.request.Request(f"http://127.0.0.1:{self.ports['mcp']}{path}", data=data, method="POST")
        return urllib.request.urlopen(req, timeout=5).read()

    def verdict(self, rid, behavior):
        self.mark(f"server sends verdict {rid} {behavior}")
        msg = {"jsonrpc": "2.0", "method": "notifications/claude/channel/permission",
               "params": {"request_id": rid, "behavior": behavior}}
        print(self.ctl("/ctl/send", json.dumps(msg).encode()))

    def records(self):
        with open(os.path.join(self.dir, "server.jsonl")) as f:
            return [json.loads(l) for l in f if l.strip()]

    def perms(self):
        return [r for r in self.records() if r["kind"] == "PERMISSION_REQUEST"]

    def wait(self, pred, timeout, what):
        end = time.time() + timeout
        while time.time() < end:
            got = [r for r in self.records() if pred(r)]
            if got:
                return got
            time.sleep(0.1)
        self.mark(f"TIMEOUT waiting {timeout}s for {what}")
        return None

    def wait_perm(self, n, timeout=40):
        end = time.time() + timeout
        while time.time() < end:
            p = self.perms()
            if len(p) >= n:
                return p[n - 1]
            time.sleep(0.1)
        self.mark(f"TIMEOUT: no permission_request #{n} within {timeout}s")
        return None

    def tmux(self, *a, **kw):
        return subprocess.run(["tmux", "-S", self.sock, *a], capture_output=True, text=True, **kw)

    def keys(self, *k, literal=False):
        self.mark("keys " + " ".join(k))
        self.tmux("send-keys", "-t", "claude", *(["-l"] if literal else []), *k)

    def type_line(self, text):
        self.mark(f"type {text!r} + Enter")
        self.tmux("send-keys", "-t", "claude", "-l", text)
        time.sleep(0.3)
        self.tmux("send-keys", "-t", "claude", "Enter")

    def answer(self, key, tag):
        """Presses `key` at the permission dialog once it is drawn and settled."""
        end = time.time() + 10
        while "Do you want to proceed" not in self.screen(tag + "-before") and time.time() < end:
            time.sleep(0.2)
        time.sleep(1.2)
        self.screen(tag + "-before")
        self.keys(key)
        time.sleep(1.0)
        self.screen(tag + "-after")

    def screen(self, tag):
        s = self.tmux("capture-pane", "-p", "-t", "claude").stdout
        with open(os.path.join(self.dir, f"screen-{tag}.txt"), "w") as f:
            f.write(s)
        return s

    def pid(self):
        try:
            return int(open(os.path.join(self.dir, "claude.pid")).read())
        except Exception:
            return None

    def alive(self):
        p = self.pid()
        if not p or not os.path.exists(f"/proc/{p}"):
            return False
        st = open(f"/proc/{p}/stat").read().split()[2]
        return st != "Z"

    # ---- lifecycle
    def start(self):
        e = dict(self.env)
        add = ["mcp", "add", "--transport", "http", "matrix", self.url]
        if self.stdio:
            add = ["mcp", "add", "matrix", "--", "python3", os.path.join(HERE, "stdio_server.py"), self.dir]
        out = subprocess.run([ELF, *add],
                             env=e, cwd=self.work, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert out.returncode == 0, out
        cf = os.path.join(self.home, ".claude", ".claude.json")
        c = json.load(open(cf))
        c.update({"hasCompletedOnboarding": True, "lastOnboardingVersion": "2.1.332", "theme": "dark",
                  "customApiKeyResponses": {"approved": [KEY[-20:]], "rejected": []},
                  "cachedGrowthBookFeatures": {"tengu_harbor": True, "tengu_harbor_permissions": True}})
        c["projects"][self.work].update({"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True})
        json.dump(c, open(cf, "w"), indent=1)
        q = lambda s: "'" + s.replace("'", "'\\''") + "'"
        argv = [ELF, "--dangerously-load-development-channels", "server:matrix", "--permission-mode", "default",
                "--debug-file", os.path.join(self.dir, "debug.txt")]
        script = f"cd {q(self.work)} || exit 1\necho $$ > ../claude.pid\nexec env -i " + \
            " ".join(f"{k}={q(v)}" for k, v in self.env.items()) + " " + " ".join(q(a) for a in argv) + "\n"
        open(os.path.join(self.dir, "run.sh"), "w").write(script)
        self.mark("launch claude")
        r = self.tmux("new-session", "-d", "-s", "claude", "-x", "200", "-y", "50", "sh " + os.path.join(self.dir, "run.sh"),
                      ";", "set-option", "-g", "remain-on-exit", "on")
        assert r.returncode == 0, r
        end = time.time() + 90
        while "local development" not in self.screen("start"):
            assert time.time() < end, "no dev-channels dialog"
            time.sleep(0.25)
        sent = 0
        while "local development" in self.screen("start"):
            if time.time() - sent > 1:
                self.tmux("send-keys", "-t", "claude", "Enter")
                sent = time.time()
            time.sleep(0.1)
        end = time.time() + 60
        while 'Channel notifications registered' not in self.debug():
            assert time.time() < end, "channel not registered"
            time.sleep(0.2)
        self.mark("channel registered (debug file)")
        time.sleep(1)

    def debug(self):
        try:
            return open(os.path.join(self.dir, "debug.txt")).read()
        except FileNotFoundError:
            return ""

    def stop(self):
        p = self.pid()
        if p and self.alive():
            self.mark("cleanup: SIGKILL claude (end of scenario)")
            os.kill(p, 9)
        time.sleep(0.5)
        self.tmux("kill-server")
        self.summarise()
        self.srv.terminate()
        self.srv.wait()
        print("run dir:", self.dir)

    def summarise(self):
        """summary.txt: the server timeline without TCP noise, then Claude Code's relevant debug lines."""
        out = []
        for r in self.records():
            if r["kind"] in ("tcp_open", "tcp_close") and r.get("server") == "api":
                continue
            if r["kind"] in ("tcp_open", "tcp_close", "rpc_notification", "rpc_request", "http_reply"):
                # keep TCP events only for the two long-lived MCP connections; the control calls are noise
                if r["kind"].startswith("tcp") and r["peer"] not in self.mcp_peers():
                    continue
                if r["kind"] != "tcp_close" and r["kind"] != "tcp_open":
                    continue
            body = {k: v for k, v in r.items() if k not in ("t", "ts", "kind")}
            if r["kind"] == "http":
                b = body.get("body")
                body = {"method": body["method"], "peer": body.get("peer"), "session": body["headers"].get("mcp-session-id", "")[:8],
                        "rpc": (b.get("method") if isinstance(b, dict) else b) if b is not None else None,
                        "params": b.get("params") if isinstance(b, dict) and "permission" in str(b.get("method")) else None}
            out.append(f"{r['ts']} {r['kind']:<18} {json.dumps(body)[:400]}")
        out.append("\n---- Claude Code debug file (channel/permission/stall/MCP lines) ----")
        for l in self.debug().splitlines():
            if any(k in l for k in ("channel", "Channel", "permission:", "PermissionRequest", "[Stall]", 'MCP server "matrix"', "cancel", "Cancel", "exit", "Exit", "shutdown", "Shutdown", "SIG")):
                out.append(l[:300])
        open(os.path.join(self.dir, "summary.txt"), "w").write("\n".join(out) + "\n")

    def mcp_peers(self):
        return {r["peer"] for r in self.records() if r["kind"] == "http" and r.get("server") == "mcp" and r.get("headers", {}).get("mcp-session-id")} | \
               {r["peer"] for r in self.records() if r["kind"] == "http" and r.get("server") == "mcp" and (r.get("body") or {}).get("method") in ("initialize", "server/discover") if isinstance(r.get("body"), dict)}

    def settle(self, secs, why=""):
        self.mark(f"observe {secs}s {why}".strip())
        time.sleep(secs)


# ---------------- scenarios
def turn_to_first_perm(r, tag, n=1):
    r.type_line(f"go-seq {tag}")
    p = r.wait_perm(n)
    time.sleep(0.7)  # let the dialog draw
    r.screen(f"perm{n}")
    return p


def s_yes(r):
    """1 + 6: Yes at the terminal (next call prompts again); late verdicts for answered ids;
    a last call answered Yes at the terminal (nothing follows); then a clean /exit."""
    p1 = turn_to_first_perm(r, "s1")
    r.answer("Enter", "yes1")  # option 1 "Yes" is preselected
    p2 = r.wait_perm(2, 30)
    r.screen("after-yes")
    r.settle(3)
    r.verdict(p1["request_id"], "allow")   # item 6: answered already at the terminal
    r.settle(3)
    r.verdict(p1["request_id"], "deny")
    r.settle(3)
    if p2:
        done = count(r, "done")
        r.verdict(p2["request_id"], "allow")  # relay answer for #2: the turn ends
        end = time.time() + 15
        while count(r, "done") <= done and time.time() < end:
            time.sleep(0.1)
        r.settle(3)
        r.verdict(p2["request_id"], "allow")  # late again, after the channel itself answered
        r.settle(3)
    step(r, "python3 -c pass", 3, "last-call", answer="Enter")
    r.settle(10, "after the last call was answered Yes at the terminal")
    r.screen("end")
    r.type_line("/exit")                  # baseline: a clean exit with nothing pending
    r.settle(8, "after /exit")


def s_no(r):
    """2: No at the terminal (option 4 \"No\"), then a next turn."""
    p1 = turn_to_first_perm(r, "s2")
    r.answer("4", "no")
    r.settle(10, "after No")
    r.screen("after-no")
    r.verdict(p1["request_id"], "allow")
    r.settle(3)
    r.type_line("go-seq s2b")
    p2 = r.wait_perm(2, 30)
    r.screen("next-turn")
    if p2:
        r.verdict(p2["request_id"], "deny")
        r.settle(6, "after deny via channel")
    r.screen("end")


def count(r, rule):
    return len([x for x in r.records() if x["kind"] == "API_MESSAGES" and x["rule"] == rule])


def step(r, cmd, n_perm, tag, answer=None):
    """Types `go-raw cmd`; waits 8 s for permission_request #n_perm; answers it at the terminal
    with `answer` (a key) if given; waits for the model's `done`. Returns the request or None."""
    done = count(r, "done")
    r.type_line("go-raw " + cmd)
    p = r.wait_perm(n_perm, 8)
    time.sleep(0.5)
    r.screen(tag)
    if p and answer:
        r.answer(answer, tag)
    end = time.time() + 15
    while count(r, "done") <= done and time.time() < end:
        time.sleep(0.1)
    r.mark(f"after {cmd!r}: permission_requests so far {len(r.perms())}; model saw done: {count(r, 'done') > done}")
    time.sleep(1)
    return p


def s_always(r):
    """3: 'Yes, and don't ask again for: python3 *' at the terminal; then identical and similar calls."""
    step(r, "python3 -c pass", 1, "1-first", answer="2")
    step(r, "python3 -c pass", 2, "2-identical")
    step(r, "python3 -c 'print(3)'", 2, "3-same-prefix")
    p = step(r, "npm --version", 2, "4-other-command")
    if p:
        r.verdict(p["request_id"], "deny")
        r.settle(4)
    # the directory option ("always allow access to DIR from this project") on touch
    n = len(r.perms())
    p = step(r, f"touch {r.work}/dir-1", n + 1, "5-touch", answer="2")
    step(r, f"touch {r.work}/dir-1", n + 2, "6-touch-again", answer="1")
    r.screen("end")


def s_auto(r):
    """3b: 'Yes, and switch to auto mode' at the terminal; then another call."""
    step(r, "python3 -c pass", 1, "1-first", answer="3")
    step(r, "npm --version", 2, "2-next", answer="1")
    r.screen("end")


def s_esc(r):
    """4a: Esc at the dialog, then a next turn."""
    p1 = turn_to_first_perm(r, "s4")
    r.answer("Escape", "esc")
    r.settle(10, "after Esc")
    r.screen("after-esc")
    r.type_line("go-seq s4b")
    p2 = r.wait_perm(2, 30)
    r.screen("next-turn")
    if p2:
        r.verdict(p2["request_id"], "deny")
        r.settle(5)


def s_ctrlc(r):
    """4b: one Ctrl-C at the dialog, then a next turn."""
    p1 = turn_to_first_perm(r, "s4c")
    r.answer("C-c", "ctrlc")
    r.settle(10, "after one Ctrl-C")
    r.screen("after-ctrlc")
    r.verdict(p1["request_id"], "allow")
    r.settle(3)
    r.screen("after-late-verdict")
    r.type_line("go-seq s4d")
    p2 = r.wait_perm(2, 30)
    r.screen("next-turn")
    if p2:
        r.verdict(p2["request_id"], "deny")
        r.settle(5)


def s_ctrlc2(r):
    """5a: Ctrl-C twice at a pending dialog."""
    turn_to_first_perm(r, "s5a")
    r.keys("C-c")
    time.sleep(0.4)
    r.keys("C-c")
    r.settle(10, "after Ctrl-C x2")
    r.screen("after")
    r.mark(f"claude alive: {r.alive()}")
    if r.alive():
        r.keys("C-c"); time.sleep(0.4); r.keys("C-c")
        r.settle(8, "after Ctrl-C x2 again")
        r.screen("after2")
        r.mark(f"claude alive: {r.alive()}")


def s_term(r):
    """5b: SIGTERM while a request is pending."""
    turn_to_first_perm(r, "s5b")
    r.mark("kill -TERM claude")
    os.kill(r.pid(), 15)
    r.settle(10, "after SIGTERM")
    r.mark(f"claude alive: {r.alive()}")


def s_kill(r):
    """5c: SIGKILL while a request is pending."""
    turn_to_first_perm(r, "s5c")
    r.mark("kill -KILL claude")
    os.kill(r.pid(), 9)
    r.settle(10, "after SIGKILL")


def s_hup(r):
    """5d: the terminal goes away (tmux kill-session: SIGHUP) while a request is pending."""
    turn_to_first_perm(r, "s5d")
    r.mark("tmux kill-session (pty closed, SIGHUP)")
    r.tmux("kill-session", "-t", "claude")
    r.settle(10, "after kill-session")
    r.mark(f"claude alive: {r.alive()}")


def s_par(r):
    """7: two tool_use blocks in one model reply: are two requests outstanding at once?"""
    r.type_line("go-par s7")
    p1 = r.wait_perm(1)
    r.settle(8, "not answering #1")
    r.screen("one-pending")
    r.mark(f"permission_requests so far: {len(r.perms())}")
    r.answer("Enter", "par1")
    p2 = r.wait_perm(2, 20)
    r.screen("second")
    r.settle(4)
    if p2:
        r.verdict(p2["request_id"], "allow")
        r.settle(6)
    r.screen("end")


def s_explore(r):
    """(setup aid) which dialog options do some commands get? Esc after each."""
    for i, cmd in enumerate(["python3 -c pass", "mkdir -p probe-dir", "git init -q", "npm --version", "rm -f nothing-here"]):
        r.type_line("go-raw " + cmd)
        if r.wait_perm(i + 1, 20):
            time.sleep(0.8)
            r.screen(f"explore{i}")
            r.keys("Escape")
            time.sleep(1.5)


def s_hold(r):
    """(setup aid) start and hold the session for manual driving (HOLD_SECS, default 300)."""
    open(os.path.join(HERE, "runs", "current"), "w").write(r.dir)
    time.sleep(float(os.environ.get("HOLD_SECS", "300")))


def s_agents(r):
    """7b: two subagents started in one reply, each calling Bash: two requests outstanding at once?"""
    r.type_line("go-agents s7b")
    p1 = r.wait_perm(1)
    r.settle(8, "not answering #1")
    r.screen("one-pending")
    r.mark(f"permission_requests so far: {len(r.perms())}")
    ps = r.perms()
    for p in ps:
        r.verdict(p["request_id"], "allow")
        time.sleep(0.5)
    r.wait_perm(len(ps) + 1, 10)
    r.screen("after-first")
    for p in r.perms()[len(ps):]:
        r.verdict(p["request_id"], "allow")
    r.settle(8)
    r.screen("end")


def s_agents2(r):
    """7c: two subagents' requests outstanding; the queued (2nd) answered by the channel first,
    then the shown one answered Yes at the terminal; then late verdicts for both."""
    r.type_line("go-agents s7c")
    r.wait_perm(2, 40)
    time.sleep(1)
    a, b = r.perms()[:2]
    r.screen("two-pending")
    r.verdict(b["request_id"], "allow")
    r.settle(4)
    r.screen("after-channel-answer-of-2nd")
    r.answer("Enter", "terminal-1st")
    r.settle(5)
    r.verdict(a["request_id"], "deny")
    r.verdict(b["request_id"], "deny")
    r.settle(4)
    r.screen("end")


def s_stdio_exit(r):
    """5e (stdio): /exit with nothing pending."""
    step(r, "python3 -c pass", 1, "first", answer="Enter")
    r.type_line("/exit")
    r.settle(8, "after /exit")


def s_stdio_term(r):
    """5f (stdio): SIGTERM to Claude Code while a request is pending."""
    turn_to_first_perm(r, "s5f")
    r.mark("kill -TERM claude")
    os.kill(r.pid(), 15)
    r.settle(8, "after SIGTERM")


def s_stdio_kill(r):
    """5g (stdio): SIGKILL to Claude Code while a request is pending."""
    turn_to_first_perm(r, "s5g")
    r.mark("kill -KILL claude")
    os.kill(r.pid(), 9)
    r.settle(8, "after SIGKILL")


def s_stdio_hup(r):
    """5h (stdio): the terminal goes away (tmux kill-session) while a request is pending."""
    turn_to_first_perm(r, "s5h")
    r.mark("tmux kill-session (pty closed, SIGHUP)")
    r.tmux("kill-session", "-t", "claude")
    r.settle(8, "after kill-session")


SCEN = {"stdio-exit": s_stdio_exit, "stdio-term": s_stdio_term, "stdio-kill": s_stdio_kill, "stdio-hup": s_stdio_hup,
        "hold": s_hold, "agents": s_agents, "agents2": s_agents2, "explore": s_explore, "auto": s_auto, "yes": s_yes, "no": s_no, "always": s_always, "esc": s_esc, "ctrlc": s_ctrlc,
        "ctrlc2": s_ctrlc2, "term": s_term, "kill": s_kill, "hup": s_hup, "par": s_par}

if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    names = sys.argv[1:]
    if names == ["list"]:
        for k, f in SCEN.items():
            print(k, "-", f.__doc__)
        sys.exit()
    if names == ["all"]:
        names = [k for k in SCEN if k not in ("hold", "explore")]
    for n in names:
        print("=== scenario", n, flush=True)
        r = Run(n, stdio=n.startswith("stdio"))
        try:
            r.start()
            SCEN[n](r)
        finally:
            try:
                r.screen("final")
            except Exception:
                pass
            r.stop()
