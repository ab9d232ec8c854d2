//! The command boundary: clap's errors and any panic (ours or a dependency's) turned into the
//! one error line every command prints.

use std::sync::Mutex;

use crate::error::Result;

/// A clap error as one line: its message and tips joined, without clap's `error: ` prefix and
/// without the usage block.
pub fn clap_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let parts: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let line = parts.join(" ");
    let line = line.trim_start_matches("error: ").trim();
    if line.is_empty() {
        "invalid arguments".to_string()
    } else {
        line.to_string()
    }
}

/// Marks a caught panic that was a failed write to stdout.
const STDOUT_MARK: &str = "\u{0}stdout: ";
/// How `println!`'s panic words EPIPE (std's `io::Error` text of the OS error).
const BROKEN_PIPE: &str = "Broken pipe";

/// Runs the command with any panic (ours or a dependency's) turned into one error line: the
/// panic's message is kept for that line, the default multi-line report stays off stderr.
pub fn catch_panics(run: impl FnOnce() -> Result<i32>) -> Result<i32> {
    static MESSAGE: Mutex<Option<String>> = Mutex::new(None);
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_string());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let line = msg.lines().next().unwrap_or_default().to_string();
        // `println!` on a closed pipe or a full device: an error of stdout, not a bug.
        if let Some(why) = line.strip_prefix("failed printing to stdout: ") {
            let why = why.split(" (os error").next().unwrap_or(why);
            if let Ok(mut m) = MESSAGE.lock() {
                m.get_or_insert(format!("{STDOUT_MARK}{why}"));
            }
            return;
        }
        if let Ok(mut m) = MESSAGE.lock() {
            m.get_or_insert(format!("{line}{at}"));
        }
    }));
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|_| {
        let msg = MESSAGE
            .lock()
            .ok()
            .and_then(|m| m.clone())
            .unwrap_or_default();
        match msg.strip_prefix(STDOUT_MARK) {
            // The reader of a pipe left (`hsdiff … | head -1`): a quiet end, as command-line
            // tools end; the rest was not wanted.
            Some(why) if why.eq_ignore_ascii_case(BROKEN_PIPE) => Ok(0),
            Some(why) => Err(crate::error::Error::output("stdout", why.to_lowercase())),
            None => Err(crate::error::Error::Internal(msg)),
        }
    })
}
