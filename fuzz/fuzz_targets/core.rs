//! The whole core: a sequence of ops over a small cast (two identities, three
//! sessions, an approver, an allowed non-approver, a stranger, both bots, three rooms
//! joined at the start and one nobody is in, three request ids, fresh event ids, a
//! monotone clock, the agent's writes, memberships and invites, events that are no
//! input, restarts) fed to `Channel::handle`, with the model's invariants checked
//! after every step. The ops, the cast and every check are in `src/core_ops.rs`:
//!
//! - every push goes to a live session attached to the same identity, of an event
//!   that reached that identity from an allowed sender (never a stranger's or the
//!   identity's own, never a notice, never verdict-shaped text), with the event's own
//!   sender, room and id in meta, reaches each session at most once, and passes the
//!   notification checks (no forged channel tag, valid meta keys);
//! - an edit is pushed only for the original's own sender; an acknowledged event is
//!   never replayed; a replay is in arrival order;
//! - a verdict is taken only from an approver, on a prompt the session asked for, by
//!   an answer that came before the prompt expired, not before the settle window,
//!   never with a withdrawn vote, never `allow` over a standing deny; a text verdict
//!   without a reply comes from the prompt's room; it is sent only to the session
//!   that asked, and delivered once;
//! - prompts go to the permission room, else the asking session's label's room (none
//!   while it has no room: the request is dropped), else (no label, or unbound) the
//!   room an allowed sender last wrote in while the identity was joined to it, which
//!   no label has; a prompt message shows a verdict only after the verdict was
//!   delivered;
//! - session rooms, by the world's own record of labels and bindings (from the
//!   attaches, the operator's binds, the approvers' `bind <label>` / `unbind` and
//!   the creation outcomes it sent, and the identity's leaves): an event of a
//!   label's room is pushed only to that label's sessions, an event of a room no
//!   label has only to sessions without a label or whose label is unbound, nothing
//!   to a session whose label's room is being created or failed (a known gap: a
//!   held push keeps the route it had when held); a new label's attach asks for one
//!   room, named after it, inviting the allowed senders; every binding change is
//!   said by one `Bound`, and the core's bindings and labels are the record; an
//!   approver's command is answered by one notice and never pushed; a bind of a
//!   room not joined is refused;
//! - by the world's own record of each identity's rooms: no push, verdict, vote or
//!   change of the room last written in comes from an event that reached the
//!   identity while it was not joined to the event's room (history before a join,
//!   events after a leave or ban); such an event is dropped as `NotJoined` and
//!   nothing else happens; the core's rooms are the world's record; an allowed
//!   sender's invite to a room not joining or joined asks for exactly one join, a
//!   stranger's or the identity's own is refused, an invite acted on is dropped,
//!   another user's membership is dropped; a join's outcome does nothing but say
//!   that it failed;
//! - an event that is no input gets one `Dropped` (by the gate when its sender is
//!   known, else as no input), and nothing else happens;
//! - after a restart no session is live (and none is pushed to or sent a verdict
//!   until it attaches again), every prompt post that was in flight is issued again
//!   with its id, room, request id and text, every other effect in flight failed
//!   (its outcome is stale), and nothing else happens; the effects in flight are
//!   always the ones the world waits for;
//! - a text verdict that replies to an event other than its prompt's message never
//!   decides;
//! - each agent write (message, edit, reaction, redaction, receipt, join, leave,
//!   invite; texts from a table of request ids spelled plainly, in upper case, with
//!   invisible, full-width or Cyrillic letters, inside HTML or Markdown, and innocent
//!   texts) gets exactly one answer carrying its call, and nothing else happens; the
//!   answer is the one the world's own reading of the rules allows: a write is never
//!   performed on a message of a prompt the identity holds or surely still remembers,
//!   nor with a text naming a request id it holds, nor as an edit of another's
//!   message, nor as a leave of a held prompt's room; a refusal is for a reason that
//!   holds; the write performed is the one asked for; its outcome does nothing more;
//! - an unreadable permission request is told to its session and dropped, and
//!   nothing else happens;
//! - grants, by the world's own record of them: a grant is made only in the call of
//!   an approver's undisputed text allow that asked for one (an allow that joined a
//!   settle window makes none), of the asking session, tool and subject (exactly,
//!   or the prefix typed, which must begin it), lasting what was asked and at most
//!   24 h, unless the input was cut short (no JSON object) or 16 grants are live,
//!   and the allow is answered by one notice; a grant answers only the permission
//!   request being handled, of its own session and tool, whose subject it covers,
//!   before its expiry, `allow` by the approver who made it, and it is the first
//!   grant that covers the request; a request a live grant covers (its session
//!   attached, a room for its prompt) is so answered, with no prompt posted and one
//!   notice replying to the grant's message; a grant ends (`GrantEnded`) only from
//!   its expiry on, on its session's detach (which ends them all) or by an
//!   approver's revoke that names it; a grant command is answered by one notice in
//!   its room and ends the expired grants and those it revokes, nothing else; the
//!   core's grants are the record; no prompt a grant answered is ever edited, its
//!   verdict is delivered once; a request a grant answers takes a place under the
//!   prompt cap like any other (seed `regress-grant-answer-over-the-prompt-cap`);
//! - the operator's policies (`Op::Policy`, at any point: up to four rules per
//!   identity over the requests' tools, `*` and their subjects, allow, deny or ask
//!   one or two approvers, a policy room; a second approver before the first
//!   input; only what `policy::check` accepts), by the world's own reading of the
//!   patterns (an allow's `*` spans no shell control character, invisible
//!   character or `..`; a deny or ask rule reads the raw preview when there is no
//!   subject): the first rule that matches decides; an allow or deny rule answers
//!   at once, by the rule, as the identity's own user, with no prompt and no
//!   notice, and one announcement naming the rule in the policy room, else the
//!   room the prompt would have gone to, none with neither, its verdict going only
//!   to the asking session, once; no grant answers a request a rule matches, and
//!   none is made on an ask rule's prompt, which names the rule and its quorum;
//!   such a prompt is allowed only when as many distinct approvers could have
//!   allowed it (text or reaction), an approver's no replying to it denies it at
//!   once, an approver's yes replying to it allows it when it completes the
//!   distinct approvers the world knows counted (its replying yeses, its
//!   reactions settled and never withdrawn), else is allowed by an allow the world
//!   cannot be sure of or told in one notice replying to the prompt, and no prompt
//!   stays answerable with its quorum counted;
//! - effect ids are fresh and increasing; the clock never runs backwards; strangers'
//!   and own events are dropped visibly; a stale outcome is dropped; a re-delivered
//!   event acts no more; the settings (fuzzed before the first input: time to live,
//!   settle window under it, prompt cap, prompt memory) never change; prompt and
//!   queue caps hold.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mc_fuzz::core_ops::{decode, World};

fuzz_target!(|data: &[u8]| {
    World::run(&decode(data));
});
