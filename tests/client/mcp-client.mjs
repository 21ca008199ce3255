#!/usr/bin/env node
// The MCP client of the end-to-end tests: the official TypeScript SDK
// (@modelcontextprotocol/sdk, pinned in package.json) over Streamable HTTP, driven by
// JSON lines, so that the peer of matrix-channel in the tests is code no one here wrote.
//
// stdin: one command per line, each with an "id" echoed in its reply.
// stdout: one JSON object per line: replies {"id", "ok": true, ...} or
//   {"id", "ok": false, "error": {"message", "code"}}, and events {"event": ...}.
// stderr: logs.
//
// Commands:
//   {"id":1,"cmd":"connect","url":"http://127.0.0.1:PORT/channel","token":"...",
//    "sessionId":optional,"protocolVersion":optional,"lastEventId":optional}
//     Without sessionId: a new session (initialize, notifications/initialized; the SDK
//     then opens the GET event stream). Reply: sessionId, protocolVersion,
//     serverCapabilities, serverInfo, instructions.
//     With sessionId: resumes that session the way the SDK supports it: the transport
//     option `sessionId` makes Client.connect skip initialize (it sends nothing), so
//     this script then opens the GET event stream itself with the public
//     `transport.resumeStream(lastEventId)` (Last-Event-ID only when lastEventId is
//     given). A server that does not know the session answers that GET with 404, which
//     is this command's error (code 404). protocolVersion, when given, is sent as the
//     MCP-Protocol-Version header as after a real initialize. The reply's
//     serverCapabilities, serverInfo and instructions are null: no initialize ran.
//   {"id":1,"cmd":"connect","stdio":{"command":"matrix-channel","args":[...],"env":{...},"cwd":..}}
//     The stdio transport instead (StdioClientTransport: the SDK spawns the command,
//     whose stdin and stdout carry the JSON-RPC lines): initialize and
//     notifications/initialized. Reply: pid (the child's), protocolVersion (the
//     negotiated one), serverCapabilities, serverInfo, instructions; sessionId null.
//     The child's stderr lines are events, and so is its exit.
//   {"id":2,"cmd":"call","tool":"name","args":{...}}   reply: result (the raw CallToolResult)
//   {"id":3,"cmd":"list_tools"}                        reply: tools
//   {"id":4,"cmd":"notify","method":"...","params":{...}}
//   {"id":5,"cmd":"close"}       transport.close(): the session stays on the server
//                                (stdio: the child's stdin is closed; the SDK sends
//                                SIGTERM if it has not exited 2 s later)
//   {"id":6,"cmd":"terminate"}   DELETE the session, then close
// Events:
//   {"event":"notification","method":..,"params":..}  every server notification
//   {"event":"http","method":"GET"|"POST"|"DELETE","status":..,"lastEventId":..}
//   {"event":"error","message":..,"code":..}          transport errors
//   {"event":"closed"}
//   {"event":"stderr","line":..}                       stdio: a line of the child's stderr
//   {"event":"exit","code":..,"signal":..}             stdio: the child exited
//
// The client declares no capabilities: Claude Code declares none for channels.
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const CLIENT_INFO = { name: 'matrix-channel-e2e', version: '0.0.0' };

let client = null;
let transport = null;

function emit(obj) {
    process.stdout.write(JSON.stringify(obj) + '\n');
}

function log(...args) {
    console.error('[mcp-client]', ...args);
}

// code: the HTTP status (StreamableHTTPError), the JSON-RPC error code (McpError), or
// the system error code of a failed connection (for instance "ECONNREFUSED").
function errorOf(err) {
    let message = String(err && err.message ? err.message : err);
    let code = err && typeof err.code !== 'undefined' ? err.code : null;
    const cause = err && err.cause;
    if (cause) {
        message += `: ${cause.message ?? cause}`;
        if (code === null && typeof cause.code !== 'undefined') {
            code = cause.code;
        }
    }
    return { message, code };
}

// Reports every HTTP exchange, so a test can see reconnects and resumptions.
function observingFetch(url, init) {
    const method = (init && init.method) || 'GET';
    const headers = new Headers(init && init.headers);
    const lastEventId = headers.get('last-event-id');
    return fetch(url, init).then(
        response => {
            emit({ event: 'http', method, status: response.status, lastEventId });
            return response;
        },
        err => {
            emit({ event: 'http', method, status: null, lastEventId, error: String(err) });
            throw err;
        },
    );
}

async function dropCurrent() {
    const old = client;
    client = null;
    transport = null;
    if (old) {
        old.onclose = undefined;
        old.onerror = undefined;
        await old.close().catch(() => {});
    }
}

// The stdio transport: the SDK spawns the command. Its stderr lines and its exit are
// reported as events (the exit through the child process, which the SDK keeps in a
// private field: it has no public exit status).
async function connectStdio(cmd) {
    const params = cmd.stdio;
    const t = new StdioClientTransport({
        command: params.command,
        args: params.args ?? [],
        env: params.env ?? undefined,
        cwd: params.cwd ?? undefined,
        stderr: 'pipe',
    });
    createInterface({ input: t.stderr }).on('line', line => emit({ event: 'stderr', line }));
    const start = t.start.bind(t);
    t.start = async () => {
        await start();
        t._process.on('exit', (code, signal) => emit({ event: 'exit', code, signal }));
    };
    // The Client hands the negotiated revision to a transport that takes it.
    let negotiated = null;
    t.setProtocolVersion = version => {
        negotiated = version;
    };
    const c = new Client(CLIENT_INFO, { capabilities: {} });
    c.fallbackNotificationHandler = async notification => {
        emit({ event: 'notification', method: notification.method, params: notification.params ?? null });
    };
    c.onerror = err => emit({ event: 'error', ...errorOf(err) });
    c.onclose = () => emit({ event: 'closed' });
    client = c;
    transport = t;
    try {
        await c.connect(t);
    } catch (err) {
        client = null;
        transport = null;
        throw err;
    }
    return {
        sessionId: null,
        pid: t.pid,
        protocolVersion: negotiated,
        serverCapabilities: c.getServerCapabilities() ?? null,
        serverInfo: c.getServerVersion() ?? null,
        instructions: c.getInstructions() ?? null,
        resumed: false,
    };
}

async function connect(cmd) {
    await dropCurrent();
    if (cmd.stdio) {
        return connectStdio(cmd);
    }
    const headers = {};
    if (cmd.token !== undefined && cmd.token !== null) {
        headers.Authorization = `Bearer ${cmd.token}`;
    }
    const t = new StreamableHTTPClientTransport(new URL(cmd.url), {
        requestInit: { headers },
        sessionId: cmd.sessionId ?? undefined,
        fetch: observingFetch,
    });
    const c = new Client(CLIENT_INFO, { capabilities: {} });
    c.fallbackNotificationHandler = async notification => {
        emit({ event: 'notification', method: notification.method, params: notification.params ?? null });
    };
    c.onerror = err => emit({ event: 'error', ...errorOf(err) });
    c.onclose = () => emit({ event: 'closed' });
    client = c;
    transport = t;
    if (cmd.sessionId) {
        if (cmd.protocolVersion) {
            t.setProtocolVersion(cmd.protocolVersion);
        }
        try {
            await c.connect(t);
            await t.resumeStream(cmd.lastEventId ?? undefined);
        } catch (err) {
            await dropCurrent();
            throw err;
        }
        return {
            sessionId: t.sessionId ?? null,
            protocolVersion: t.protocolVersion ?? null,
            serverCapabilities: null,
            serverInfo: null,
            instructions: null,
            resumed: true,
        };
    }
    try {
        await c.connect(t);
    } catch (err) {
        client = null;
        transport = null;
        throw err;
    }
    return {
        sessionId: t.sessionId ?? null,
        protocolVersion: t.protocolVersion ?? null,
        serverCapabilities: c.getServerCapabilities() ?? null,
        serverInfo: c.getServerVersion() ?? null,
        instructions: c.getInstructions() ?? null,
        resumed: false,
    };
}

function needClient() {
    if (!client) {
        const err = new Error('not connected');
        err.code = 'not_connected';
        throw err;
    }
    return client;
}

const listedTools = new WeakSet();

async function run(cmd) {
    switch (cmd.cmd) {
        case 'connect':
            return connect(cmd);
        case 'call': {
            // The SDK validates structuredContent against a tool's outputSchema only
            // for tools it has listed: list once per client, so every call is checked.
            if (!listedTools.has(needClient())) {
                await needClient().listTools();
                listedTools.add(needClient());
            }
            const result = await needClient().callTool({ name: cmd.tool, arguments: cmd.args ?? {} });
            return { result };
        }
        case 'list_tools': {
            const { tools } = await needClient().listTools();
            return { tools };
        }
        case 'notify':
            await needClient().notification({ method: cmd.method, params: cmd.params ?? {} });
            return {};
        case 'close':
            await dropCurrentWithEvent();
            return {};
        case 'terminate': {
            needClient();
            await transport.terminateSession();
            await dropCurrentWithEvent();
            return {};
        }
        default: {
            const err = new Error(`unknown command ${JSON.stringify(cmd.cmd)}`);
            err.code = 'bad_command';
            throw err;
        }
    }
}

// close/terminate: the "closed" event is emitted once, by the SDK's onclose.
async function dropCurrentWithEvent() {
    const c = client;
    client = null;
    transport = null;
    if (c) {
        await c.close();
        // Streams aborted by the close report AbortErrors afterwards: not news.
        c.onerror = undefined;
    }
}

const lines = createInterface({ input: process.stdin });
lines.on('line', line => {
    if (!line.trim()) {
        return;
    }
    let cmd;
    try {
        cmd = JSON.parse(line);
    } catch (err) {
        emit({ id: null, ok: false, error: { message: `bad JSON: ${err.message}`, code: 'bad_json' } });
        return;
    }
    run(cmd).then(
        value => emit({ id: cmd.id ?? null, ok: true, ...value }),
        err => {
            log(`${cmd.cmd} failed:`, err && err.stack ? err.stack : err);
            emit({ id: cmd.id ?? null, ok: false, error: errorOf(err) });
        },
    );
});
lines.on('close', () => {
    dropCurrent().finally(() => process.exit(0));
});
