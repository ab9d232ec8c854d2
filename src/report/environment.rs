//! What a report's environment differences come to, for the printers: whether each side's
//! fingerprint records an environment at all, and which differences say what ran differently.

use super::{EnvDiff, Report};
use crate::capture::envdiff::{is_recorded, ran_differently};

impl Report {
    /// Whether A's and B's fingerprints record an environment (a file written without one
    /// records none).
    pub fn env_recorded(&self) -> (bool, bool) {
        (
            is_recorded(&self.a.fingerprint),
            is_recorded(&self.b.fingerprint),
        )
    }

    /// The environment differences that say what ran differently (and can change the numbers),
    /// then the rest.
    pub fn env_ran_differently(&self) -> (Vec<&EnvDiff>, Vec<&EnvDiff>) {
        self.env_diff
            .iter()
            .partition(|d| d.matters && ran_differently(&d.key))
    }
}
