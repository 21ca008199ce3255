//! Withdrawn prompts ([`Phase::Withdrawn`]): when the session that asked
//! disconnects (its stream closed, [`crate::Input::Detach`]), each of its prompts
//! nobody answered yet is edited to say so and can no longer be answered; a verdict
//! or vote for it gets a notice. When the session attaches again, the prompts open
//! again and their messages show the prompt once more.
//!
//! Why the stream's end is the signal, and why an answer at the terminal is not
//! detected: docs/notes/claude-code-answered-elsewhere.md (measured with Claude
//! Code 2.1.332); the rules: docs/decisions/0030-withdrawn-prompts.md.

use super::identity::IdentityState;
use super::prompts::Phase;
use super::{InFlight, Out};
use crate::effect::{DropReason, Effect};
use crate::ids::{EventId, RoomId, SessionId};
use crate::prompt_text::{render_asked, render_withdrawn, Asker};

impl IdentityState {
    /// `session`'s stream closed: each of its pending or settling prompts is
    /// withdrawn (votes still settling count for nothing). A prompt still being
    /// posted is withdrawn when its post completes, if the session has not
    /// attached again by then.
    pub(super) fn withdraw_prompts(&mut self, session: &SessionId, out: &mut Out<'_>) {
        let mine: Vec<usize> = (0..self.prompts.len())
            .filter(|&i| self.prompts[i].session == *session)
            .collect();
        for index in mine {
            if let Phase::Posting { post } = &self.prompts[index].phase {
                if let Some(InFlight::Post { withdrawn, .. }) = out.in_flight.get_mut(post) {
                    *withdrawn = true;
                }
            }
            self.withdraw(index, out);
        }
    }

    /// Withdraws the prompt at `index` if it is answerable, and edits its message
    /// to [`render_withdrawn`].
    pub(super) fn withdraw(&mut self, index: usize, out: &mut Out<'_>) {
        let prompt = &mut self.prompts[index];
        if !prompt.phase.is_answerable() {
            return;
        }
        let Some(message) = prompt.phase.message().cloned() else {
            return;
        };
        prompt.phase = Phase::Withdrawn {
            message: message.clone(),
        };
        let asker = Asker {
            label: self.labels.get(&prompt.session),
            session: &prompt.session,
        };
        out.effects.push(Effect::EditPrompt {
            identity: out.identity.clone(),
            room: prompt.room.clone(),
            event_id: message,
            text: render_withdrawn(&prompt.request, asker),
        });
    }

    /// `session` attached: its withdrawn prompts are pending again, and each
    /// message shows the prompt again (as posted, with the session's label now).
    pub(super) fn reopen_prompts(&mut self, session: &SessionId, out: &mut Out<'_>) {
        let config = &self.config;
        let label = self.labels.get(session);
        for prompt in self.prompts.iter_mut().filter(|p| p.session == *session) {
            let Phase::Withdrawn { message } = &prompt.phase else {
                continue;
            };
            let message = message.clone();
            prompt.phase = Phase::Pending {
                message: message.clone(),
            };
            let asker = Asker { label, session };
            out.effects.push(Effect::EditPrompt {
                identity: out.identity.clone(),
                room: prompt.room.clone(),
                event_id: message,
                text: render_asked(config, &prompt.request, Some(asker), prompt.rule.as_ref()),
            });
        }
    }

    /// An answer (`answer`: a text verdict or a vote) to the withdrawn prompt at
    /// `index` counts for nothing; the approver is told, in a notice replying to
    /// `reply_to` in `room`.
    pub(super) fn withdrawn_answered(
        &mut self,
        index: usize,
        room: &RoomId,
        reply_to: &EventId,
        answer: &EventId,
        out: &mut Out<'_>,
    ) {
        let id = self.prompts[index].request.request_id.clone();
        out.notice(
            room,
            reply_to,
            format!(
                "Permission request {id} is withdrawn: the session that asked disconnected, \
                 so this answer counts for nothing. The prompt opens again if the session \
                 connects again; answer it then."
            ),
        );
        out.drop(Some(answer), DropReason::PromptWithdrawn);
    }
}
