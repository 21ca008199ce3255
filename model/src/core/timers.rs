//! What fires when time passes, before every input: settle windows end, prompts
//! expire, undecryptable events' grace ends, sessions' attach grace ends.

use super::identity::IdentityState;
use super::prompts::Phase;
use super::Out;
use crate::effect::DropReason;

impl IdentityState {
    pub(super) fn fire_timers(&mut self, out: &mut Out<'_>) {
        let now = out.now;
        let settled: Vec<u64> = self
            .prompts
            .iter()
            .filter(|p| matches!(p.phase, Phase::Settling { until, .. } if until <= now && until <= p.expires_at))
            .map(|p| p.serial)
            .collect();
        for serial in settled {
            self.settle(serial, out);
        }
        while let Some(index) = self
            .prompts
            .iter()
            .position(|p| p.expires_at <= now && p.phase.is_unanswered())
        {
            self.retire(index, DropReason::PromptExpired, out);
        }
        self.fire_undecryptable(out);
        self.fire_attach_graces(out);
        self.fire_typing(out);
    }
}
