"""An encrypting human for the end-to-end tests: a matrix-nio 0.26 client with its own
end-to-end encryption (vodozemac), which no one on this project wrote.

Driven by tests/e2e/harness/nio.rs over JSON lines: each line on stdin is one request
`{"id": N, "cmd": "...", ...}`, answered by exactly one line on stdout,
`{"id": N, "ok": true, ...}` or `{"id": N, "ok": false, "error": {"kind", "message"}}`.
Requests run concurrently (a `wait_event` does not hold up a `send_text`); the process
exits when stdin closes. Logs go to stderr.

After `login`, a sync loop runs in the background (long-polls of one second), and after
every sync the crypto upkeep nio's `sync_forever` would do (to-device messages, key
upload, key query, one-time key claims), under one lock that the sends share. Every
timeline event of every joined room is kept, decrypted where nio can: `wait_event`
searches them all, the ones already seen included. An event nio could not decrypt when
it arrived is tried again after every sync (its key may come later).

Run it with the venv of scripts/nio/setup.
"""

import asyncio
import base64
import io
import json
import logging
import os
import sys
import traceback
import uuid

from nio import (
    AsyncClient,
    AsyncClientConfig,
    ErrorResponse,
    LoginResponse,
    MegolmEvent,
    RoomCreateResponse,
    RoomSendResponse,
    SyncResponse,
)
from nio.api import Api
from nio.crypto.attachments import decrypt_attachment
from nio.event_builders import ToDeviceMessage
from nio.exceptions import OlmUnverifiedDeviceError

log = logging.getLogger("nio-human")

# One long-poll at a time; short, so that `sync` (wait for a sync that started after the
# request) answers within about a second when nothing happens.
SYNC_TIMEOUT_MS = 1000
SYNC_FILTER = {
    "presence": {"not_types": ["*"]},
    "room": {"timeline": {"limit": 100}, "ephemeral": {"not_types": ["*"]}},
}
DEFAULT_WAIT_MS = 20000


class Failure(Exception):
    """A request that cannot be done: answered as `{"kind", "message"}`."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind
        self.message = message


def require(req, key):
    if key not in req:
        raise Failure("bad_request", f"missing field {key!r} in {req.get('cmd')!r}")
    return req[key]


def check(resp, what):
    """nio answers errors as values: turn them into a Failure."""
    if isinstance(resp, ErrorResponse):
        raise Failure(
            "matrix",
            f"{what}: {getattr(resp, 'status_code', None)} {resp.message}",
        )
    return resp


class Human:
    def __init__(self):
        self.client = None
        self.sync_task = None
        # Completed syncs, and syncs started; `changed` wakes every waiter after a sync.
        self.syncs_done = 0
        self.syncs_started = 0
        self.sync_error = None
        self.changed = asyncio.Condition()
        # Crypto upkeep and sends take turns (nio raises when a key query or claim finds
        # nothing left to do, so two at once can fail one of them).
        self.crypto = asyncio.Lock()
        # room_id -> [record], in timeline order; event_id -> record.
        self.timeline = {}
        self.by_id = {}
        # Records of events nio could not decrypt yet, with their MegolmEvent.
        self.undecrypted = []
        # Every outbound Megolm session this client created: room_id -> [(session_id,
        # session_key at index 0)], so that `reshare_keys` can hand a device a key for
        # messages sent while it was left out.
        self.room_keys = {}

    # ------------------------------------------------------------------ login, sync

    async def login(self, req):
        if self.client is not None:
            raise Failure("bad_request", "already logged in")
        store = require(req, "store_dir")
        os.makedirs(store, exist_ok=True)
        config = AsyncClientConfig(
            encryption_enabled=True, store_sync_tokens=True, max_timeouts=3
        )
        client = AsyncClient(
            require(req, "homeserver"),
            require(req, "user_id"),
            store_path=store,
            config=config,
        )
        resp = await client.login(
            require(req, "password"), device_name=req.get("device_name", "nio human")
        )
        if not isinstance(resp, LoginResponse):
            await client.close()
            raise Failure("matrix", f"login: {resp}")
        self.client = client
        self.record_room_keys()
        if req.get("display_name"):
            check(await client.set_displayname(req["display_name"]), "set_displayname")
        # The first sync, then the upkeep (key upload), before anything is sent.
        await self.sync_once(0)
        self.sync_task = asyncio.create_task(self.sync_loop())
        return {
            "user_id": client.user_id,
            "device_id": client.device_id,
            "access_token": client.access_token,
            "ed25519": client.olm.account.identity_keys["ed25519"],
            "curve25519": client.olm.account.identity_keys["curve25519"],
        }

    def record_room_keys(self):
        """Wraps the Olm machine's outbound session creation to keep each new session's
        key at index 0 (vodozemac only gives the current index later)."""
        olm = self.client.olm
        original = olm.create_outbound_group_session

        def create(room_id):
            original(room_id)
            session = olm.outbound_group_sessions[room_id]
            self.room_keys.setdefault(room_id, []).append(
                (session.id, session.session_key)
            )

        olm.create_outbound_group_session = create

    async def sync_once(self, timeout_ms):
        self.syncs_started += 1
        resp = await self.client.sync(
            timeout=timeout_ms, sync_filter=SYNC_FILTER, set_presence="offline"
        )
        if not isinstance(resp, SyncResponse):
            raise Failure("matrix", f"sync: {resp}")
        self.take(resp)
        await self.upkeep()
        self.retry_undecrypted()
        async with self.changed:
            self.syncs_done += 1
            self.changed.notify_all()

    async def sync_loop(self):
        while True:
            try:
                await self.sync_once(SYNC_TIMEOUT_MS)
                self.sync_error = None
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - reported to waiters, retried
                self.sync_error = f"{type(e).__name__}: {e}"
                log.warning("sync failed: %s", self.sync_error)
                async with self.changed:
                    self.changed.notify_all()
                await asyncio.sleep(0.5)

    async def upkeep(self):
        """What nio's sync_forever does between syncs."""
        c = self.client
        async with self.crypto:
            if c.outgoing_to_device_messages:
                for r in await c.send_to_device_messages():
                    check(r, "send_to_device_messages")
            if c.should_upload_keys:
                check(await c.keys_upload(), "keys_upload")
            if c.should_query_keys:
                check(await c.keys_query(), "keys_query")
            if c.should_claim_keys:
                check(
                    await c.keys_claim(c.get_users_for_key_claiming()), "keys_claim"
                )

    def take(self, resp):
        for room_id, info in resp.rooms.join.items():
            for event in info.timeline.events:
                record = self.record(room_id, event)
                if record is None:
                    continue
                if record["event_id"] in self.by_id:
                    continue
                self.timeline.setdefault(room_id, []).append(record)
                self.by_id[record["event_id"]] = record
                if isinstance(event, MegolmEvent):
                    self.undecrypted.append((record, event))

    @staticmethod
    def record(room_id, event):
        source = getattr(event, "source", None)
        if not isinstance(source, dict) or "event_id" not in source:
            return None
        if isinstance(event, MegolmEvent):
            # Encrypted, and nio has no key (yet): what the wire says.
            return {
                "room_id": room_id,
                "event_id": source["event_id"],
                "sender": source.get("sender"),
                "type": "m.room.encrypted",
                "encrypted": True,
                "decrypted": False,
                "session_id": event.session_id,
                "content": source.get("content", {}),
                "body": None,
            }
        decrypted = bool(getattr(event, "decrypted", False))
        content = source.get("content", {})
        return {
            "room_id": room_id,
            "event_id": source["event_id"],
            "sender": source.get("sender"),
            "type": source.get("type"),
            "encrypted": decrypted,
            "decrypted": decrypted,
            "session_id": getattr(event, "session_id", None) if decrypted else None,
            "content": content,
            "body": content.get("body") if isinstance(content, dict) else None,
        }

    def retry_undecrypted(self):
        left = []
        for record, event in self.undecrypted:
            clear = self.client.olm._decrypt_megolm_no_error(event, record["room_id"])
            if clear is None or isinstance(clear, MegolmEvent):
                left.append((record, event))
                continue
            fresh = self.record(record["room_id"], clear)
            if fresh is None:
                left.append((record, event))
                continue
            fresh["late"] = True
            record.clear()
            record.update(fresh)
        self.undecrypted = left

    async def wait_sync(self, req):
        """Waits until a sync that started after this request has been handled."""
        after = self.syncs_started
        await self.wait_until(
            "a sync started after the request",
            lambda: self.syncs_done > after,
            req.get("timeout_ms", DEFAULT_WAIT_MS),
        )
        return {"syncs": self.syncs_done}

    async def wait_until(self, what, pred, timeout_ms):
        """Waits (sync by sync) until `pred()` returns something truthy; returns it."""

        async def loop():
            async with self.changed:
                while True:
                    found = pred()
                    if found:
                        return found
                    await self.changed.wait()

        try:
            return await asyncio.wait_for(loop(), timeout_ms / 1000)
        except asyncio.TimeoutError:
            extra = f" (last sync error: {self.sync_error})" if self.sync_error else ""
            raise Failure("timeout", f"{what}: not within {timeout_ms} ms{extra}")

    # ------------------------------------------------------------------ rooms

    def room(self, room_id):
        room = self.client.rooms.get(room_id)
        if room is None:
            raise Failure("unknown_room", f"{room_id} is not a room this client has joined")
        return room

    async def create_room(self, req):
        encrypted = req.get("encrypted", True)
        initial_state = []
        if encrypted:
            initial_state.append(
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            )
        resp = check(
            await self.client.room_create(
                name=req.get("name"),
                invite=req.get("invite", []),
                initial_state=initial_state,
            ),
            "room_create",
        )
        assert isinstance(resp, RoomCreateResponse)
        room_id = resp.room_id

        def ready():
            room = self.client.rooms.get(room_id)
            return room is not None and room.encrypted == encrypted

        await self.wait_until(f"the new room {room_id}", ready, DEFAULT_WAIT_MS)
        return {"room_id": room_id}

    async def invite(self, req):
        check(
            await self.client.room_invite(require(req, "room"), require(req, "user")),
            "room_invite",
        )
        return {}

    async def join(self, req):
        room_id = require(req, "room")
        check(await self.client.join(room_id), "join")
        await self.wait_until(f"the joined room {room_id}", lambda: room_id in self.client.rooms, DEFAULT_WAIT_MS)
        return {}

    async def wait_joined(self, req):
        """Waits until `user` is joined in this client's view of the room and nio knows
        the user's devices (so the next send shares the room key with them)."""
        room_id, user = require(req, "room"), require(req, "user")
        c = self.client

        def joined():
            room = c.rooms.get(room_id)
            if room is None or user not in room.users or room.users[user].invited:
                return None
            if room.encrypted:
                if user in c.olm.users_for_key_query:
                    return None
                devices = list(c.device_store.active_user_devices(user))
                if not devices:
                    return None
                return sorted(d.id for d in devices)
            return ["-"]

        devices = await self.wait_until(
            f"{user} joined in {room_id}", joined, req.get("timeout_ms", DEFAULT_WAIT_MS)
        )
        return {"devices": [] if devices == ["-"] else devices}

    # ------------------------------------------------------------------ sends

    async def send(self, room_id, event_type, content, strict=False):
        room = self.room(room_id)
        # What room_send would do, under the upkeep's lock: members, keys, sessions.
        await self.upkeep()
        async with self.crypto:
            if strict:
                # A lenient send marks every unverified device "ignored" in nio's
                # store, for good, and ignored devices pass a strict send: make
                # them unverified again (the room's outbound session is replaced).
                for user in room.users:
                    for d in self.client.device_store.active_user_devices(user):
                        if self.client.olm.is_device_ignored(d):
                            self.client.unignore_device(d)
            try:
                resp = await self.client.room_send(
                    room_id,
                    event_type,
                    content,
                    ignore_unverified_devices=not strict,
                )
            except OlmUnverifiedDeviceError as e:
                raise Failure("unverified_device", str(e))
        check(resp, f"send {event_type}")
        session = self.client.olm.outbound_group_sessions.get(room_id)
        encrypted = room.encrypted and event_type != "m.reaction"
        return {
            "event_id": resp.event_id,
            "encrypted": encrypted,
            "session_id": session.id if encrypted and session else None,
        }

    async def send_text(self, req):
        content = {"msgtype": "m.text", "body": require(req, "body")}
        return await self.send(require(req, "room"), "m.room.message", content, req.get("strict", False))

    async def reply(self, req):
        # A rich reply as clients of spec v1.13 on send it: no fallback.
        content = {
            "msgtype": "m.text",
            "body": require(req, "body"),
            "m.relates_to": {"m.in_reply_to": {"event_id": require(req, "parent")}},
        }
        return await self.send(require(req, "room"), "m.room.message", content, req.get("strict", False))

    async def edit(self, req):
        body = require(req, "body")
        content = {
            "msgtype": "m.text",
            "body": f"* {body}",
            "m.new_content": {"msgtype": "m.text", "body": body},
            "m.relates_to": {"rel_type": "m.replace", "event_id": require(req, "original")},
        }
        return await self.send(require(req, "room"), "m.room.message", content, req.get("strict", False))

    async def react(self, req):
        """A reaction. nio sends `m.reaction` in the clear, even in an encrypted room;
        with `"encrypted": true` it is Megolm-encrypted as Element sends it (the
        `m.relates_to` stays in the clear too, as the spec asks)."""
        room_id = require(req, "room")
        content = {
            "m.relates_to": {
                "rel_type": "m.annotation",
                "event_id": require(req, "target"),
                "key": require(req, "key"),
            }
        }
        if not req.get("encrypted", False):
            return await self.send(room_id, "m.reaction", content, req.get("strict", False))
        room = self.room(room_id)
        if not room.encrypted:
            raise Failure("bad_request", f"{room_id} is not encrypted")
        c = self.client
        await self.upkeep()
        async with self.crypto:
            if c.olm.should_share_group_session(room_id):
                check(
                    await c.share_group_session(room_id, ignore_unverified_devices=True),
                    "share_group_session",
                )
            _, encrypted = c.encrypt(room_id, "m.reaction", content)
            method, path, data = Api.room_send(
                c.access_token, room_id, "m.room.encrypted", encrypted, uuid.uuid4()
            )
            resp = check(
                await c._send(RoomSendResponse, method, path, data, (room_id,)),
                "send an encrypted m.reaction",
            )
        return {
            "event_id": resp.event_id,
            "encrypted": True,
            "session_id": encrypted["session_id"],
        }

    async def send_file(self, req):
        """An attachment: `data_base64` uploaded (with `"encrypted": true`, the default,
        AES-CTR-encrypted by nio as the spec's "Sending encrypted attachments" asks)
        and sent as `msgtype` (`m.file` by default) with `body` = `filename` and
        `info` {mimetype, size}; encrypted media goes in `file` {url, key, iv, hashes,
        v} instead of `url`. Answers the send's fields, `mxc` and `file` (or null)."""
        room_id = require(req, "room")
        data = base64.b64decode(require(req, "data_base64"))
        filename = require(req, "filename")
        mimetype = req.get("mimetype", "application/octet-stream")
        encrypt = req.get("encrypted", True)
        resp, keys = await self.client.upload(
            io.BytesIO(data),
            content_type=mimetype,
            filename=filename,
            encrypt=encrypt,
            filesize=len(data),
        )
        uri = check(resp, "upload").content_uri
        content = {
            "msgtype": req.get("msgtype", "m.file"),
            "body": filename,
            "info": {"mimetype": mimetype, "size": len(data)},
        }
        if encrypt:
            content["file"] = {"url": uri, **keys}
        else:
            content["url"] = uri
        sent = await self.send(room_id, "m.room.message", content, req.get("strict", False))
        return {**sent, "mxc": uri, "file": content.get("file")}

    async def download(self, req):
        """The bytes of `mxc`, fetched through the authenticated media API
        (`GET /_matrix/client/v1/media/download/{server}/{media_id}`, Client-Server API
        "Content repository") with this device's token; with `file` (an encrypted
        attachment's {url, key, iv, hashes}) decrypted by nio, which checks the
        ciphertext's sha256 first. Answers `data_base64`."""
        mxc = require(req, "mxc")
        if not mxc.startswith("mxc://") or "/" not in mxc[6:]:
            raise Failure("bad_request", f"not an mxc URI: {mxc!r}")
        server, media_id = mxc[6:].split("/", 1)
        url = f"{self.client.homeserver}/_matrix/client/v1/media/download/{server}/{media_id}"
        headers = {"Authorization": f"Bearer {self.client.access_token}"}
        async with self.client.client_session.get(url, headers=headers) as r:
            body = await r.read()
            if r.status != 200:
                raise Failure("matrix", f"download {mxc}: {r.status} {body[:200]!r}")
        file = req.get("file")
        if file:
            body = decrypt_attachment(
                body, file["key"]["k"], file["hashes"]["sha256"], file["iv"]
            )
        return {"data_base64": base64.b64encode(body).decode()}

    async def send_event(self, req):
        """Any message event `type` with `content`, as `room_send` sends it
        (encrypted in an encrypted room)."""
        return await self.send(
            require(req, "room"), require(req, "type"), require(req, "content"),
            req.get("strict", False),
        )

    async def enable_encryption(self, req):
        """Sends `m.room.encryption` (`m.megolm.v1.aes-sha2`) into a room that had
        none, and waits until nio takes the room as encrypted."""
        room_id = require(req, "room")
        check(
            await self.client.room_put_state(
                room_id, "m.room.encryption", {"algorithm": "m.megolm.v1.aes-sha2"}
            ),
            "room_put_state m.room.encryption",
        )
        await self.wait_until(
            f"{room_id} encrypted", lambda: self.room(room_id).encrypted, DEFAULT_WAIT_MS
        )
        return {}

    async def verify(self, req):
        """Marks the device(s) of `user` verified in nio's store (nio has no
        cross-signing: this is its only trust). A strict send then shares room keys
        with them. Answers each device's ed25519 key, so the caller can check it
        against the one it got out of band."""
        devices = self.devices_of(req)
        return {
            "changed": {d.id: self.client.verify_device(d) for d in devices},
            "ed25519": {d.id: d.ed25519 for d in devices},
        }

    async def redact(self, req):
        # Redactions are never encrypted (the server must read `redacts`).
        resp = check(
            await self.client.room_redact(
                require(req, "room"), require(req, "event_id"), reason=req.get("reason")
            ),
            "room_redact",
        )
        return {"event_id": resp.event_id, "encrypted": False, "session_id": None}

    # ------------------------------------------------------------------ reading

    async def wait_event(self, req):
        """The first event of the room (in timeline order, the ones seen before this
        request included) that matches every given field: `sender`, `event_id`, `type`
        (after decryption), `rel_type`, `relates_to` (the related event's id),
        `body_contains`, `decrypted`."""
        room_id = require(req, "room")

        def matches(r):
            rel = r["content"].get("m.relates_to", {}) if isinstance(r["content"], dict) else {}
            reply_to = rel.get("m.in_reply_to", {}).get("event_id")
            checks = {
                "sender": r["sender"],
                "event_id": r["event_id"],
                "type": r["type"],
                "rel_type": rel.get("rel_type") or ("m.in_reply_to" if reply_to else None),
                "relates_to": rel.get("event_id") or reply_to,
                "decrypted": r["decrypted"],
            }
            for key, actual in checks.items():
                if key in req and req[key] != actual:
                    return False
            if "body_contains" in req:
                return isinstance(r["body"], str) and req["body_contains"] in r["body"]
            return True

        def found():
            for r in self.timeline.get(room_id, []):
                if matches(r):
                    return dict(r)
            return None

        what = {k: v for k, v in req.items() if k not in ("id", "cmd")}
        return {
            "event": await self.wait_until(
                f"an event {json.dumps(what)}", found, req.get("timeout_ms", DEFAULT_WAIT_MS)
            )
        }

    # ------------------------------------------------------------------ devices, keys

    def device(self, user, device_id):
        devices = self.client.device_store.active_user_devices(user)
        for d in devices:
            if d.id == device_id:
                return d
        raise Failure("unknown_device", f"{user} has no known device {device_id}")

    def devices_of(self, req):
        user = require(req, "user")
        if "device" in req:
            return [self.device(user, req["device"])]
        devices = list(self.client.device_store.active_user_devices(user))
        if not devices:
            raise Failure("unknown_device", f"no known device of {user}")
        return devices

    async def devices(self, req):
        c = self.client
        return {
            "devices": [
                {
                    "device_id": d.id,
                    "ed25519": d.ed25519,
                    "verified": c.olm.is_device_verified(d),
                    "blacklisted": c.olm.is_device_blacklisted(d),
                    "ignored": c.olm.is_device_ignored(d),
                }
                for d in self.devices_of(req)
            ]
        }

    async def blacklist(self, req):
        """Blacklists the device(s): nio shares no room key with them from now on (the
        room's outbound session is replaced)."""
        return {"changed": {d.id: self.client.blacklist_device(d) for d in self.devices_of(req)}}

    async def unblacklist(self, req):
        """Takes the device(s) off the blacklist: the next send shares a new session
        with them; older sessions only by `reshare_keys`."""
        return {"changed": {d.id: self.client.unblacklist_device(d) for d in self.devices_of(req)}}

    async def reshare_keys(self, req):
        """Sends every room key this client made in `room` (each at its first index) to
        the device(s) of `user`, Olm-encrypted as `m.room_key`, so they can decrypt
        what was sent while they were left out (blacklisted)."""
        room_id = require(req, "room")
        c = self.client
        keys = self.room_keys.get(room_id, [])
        if "session_id" in req:
            keys = [k for k in keys if k[0] == req["session_id"]]
        if not keys:
            raise Failure("no_room_key", f"this client made no room key in {room_id}")
        devices = self.devices_of(req)
        async with self.crypto:
            missing = {}
            for d in devices:
                if not c.olm.session_store.get(d.curve25519):
                    missing.setdefault(d.user_id, []).append(d.id)
            if missing:
                check(await c.keys_claim(missing), "keys_claim")
            for d in devices:
                session = c.olm.session_store.get(d.curve25519)
                if session is None:
                    raise Failure("no_olm_session", f"no Olm session with {d.user_id} {d.id}")
                for session_id, session_key in keys:
                    content = {
                        "algorithm": "m.megolm.v1.aes-sha2",
                        "room_id": room_id,
                        "session_id": session_id,
                        "session_key": session_key,
                    }
                    payload = c.olm._olm_encrypt(session, d, "m.room_key", content)
                    message = ToDeviceMessage("m.room.encrypted", d.user_id, d.id, payload)
                    check(await c.to_device(message), f"sendToDevice {session_id}")
        return {"sessions": [k[0] for k in keys], "devices": [d.id for d in devices]}

    # ------------------------------------------------------------------ the loop

    async def handle(self, req):
        cmd = req.get("cmd")
        if cmd != "login" and self.client is None:
            raise Failure("bad_request", f"{cmd!r} before login")
        handler = {
            "login": self.login,
            "create_room": self.create_room,
            "invite": self.invite,
            "join": self.join,
            "wait_joined": self.wait_joined,
            "send_text": self.send_text,
            "reply": self.reply,
            "edit": self.edit,
            "react": self.react,
            "redact": self.redact,
            "send_file": self.send_file,
            "download": self.download,
            "send_event": self.send_event,
            "enable_encryption": self.enable_encryption,
            "verify": self.verify,
            "wait_event": self.wait_event,
            "sync": self.wait_sync,
            "devices": self.devices,
            "blacklist": self.blacklist,
            "unblacklist": self.unblacklist,
            "reshare_keys": self.reshare_keys,
        }.get(cmd)
        if handler is None:
            raise Failure("bad_request", f"unknown command {cmd!r}")
        return await handler(req)

    async def close(self):
        if self.sync_task:
            self.sync_task.cancel()
            try:
                await self.sync_task
            except BaseException:  # noqa: BLE001
                pass
        if self.client:
            await self.client.close()


def write(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def serve(human, req):
    rid = req.get("id")
    try:
        out = await human.handle(req)
        write({"id": rid, "ok": True, **out})
    except Failure as e:
        write({"id": rid, "ok": False, "error": {"kind": e.kind, "message": e.message}})
    except Exception as e:  # noqa: BLE001 - every request gets its one answer
        log.error("%s failed:\n%s", req.get("cmd"), traceback.format_exc())
        write(
            {
                "id": rid,
                "ok": False,
                "error": {"kind": type(e).__name__, "message": f"{req.get('cmd')}: {e}"},
            }
        )


async def main():
    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("NIO_HUMAN_LOG", "WARNING"),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if "NIO_HUMAN_LOG" not in os.environ:
        # nio warns on every retry of an event whose key has not come (yet).
        logging.getLogger("nio").setLevel(logging.ERROR)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    human = Human()
    tasks = set()
    while True:
        line = await reader.readline()
        if not line:
            break
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError as e:
            write({"id": None, "ok": False, "error": {"kind": "bad_request", "message": f"not JSON: {e}"}})
            continue
        task = asyncio.create_task(serve(human, req))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    for task in tasks:
        task.cancel()
    await human.close()


if __name__ == "__main__":
    asyncio.run(main())
