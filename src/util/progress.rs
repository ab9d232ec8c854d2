//! Progress and cost of a forward pass on stderr: layers done / total, tokens/s, ETA and peak
//! memory. On a terminal it is a bar; otherwise (a log file, a pipe) a plain line now and then,
//! only once a pass has run for a while, so that short runs and tests print nothing. A pass
//! that took long ends with one summary line stating its wall time.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Passes shorter than this print no lines off-terminal and no summary.
const QUIET_FOR: Duration = Duration::from_secs(10);
/// Off-terminal, at most one progress line per this interval.
const LINE_EVERY: Duration = Duration::from_secs(30);

pub struct Progress {
    label: String,
    total: u64,
    bar: Option<ProgressBar>,
    /// `None` for [`Progress::hidden`].
    state: Option<Mutex<State>>,
}

struct State {
    start: Instant,
    tokens: usize,
    last_line: Option<Instant>,
}

impl Progress {
    /// Progress over `total` layers labelled `label`: a bar when stderr is a terminal.
    pub fn new(label: &str, total: u64) -> Self {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let bar = (!bar.is_hidden()).then(|| {
            let style = ProgressStyle::with_template(
                "{prefix:>12} [{bar:30}] {pos}/{len} layers {msg} (ETA {eta})",
            )
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_prefix(label.to_string());
            bar
        });
        Progress {
            label: label.to_string(),
            total,
            bar,
            state: Some(Mutex::new(State {
                start: Instant::now(),
                tokens: 0,
                last_line: None,
            })),
        }
    }

    /// Reports nothing (benchmarks, self-tests).
    pub fn hidden() -> Self {
        Progress {
            label: String::new(),
            total: 0,
            bar: None,
            state: None,
        }
    }

    /// A pass over `tokens` tokens starts now.
    pub fn begin(&self, tokens: usize) {
        self.with_state(|s| {
            s.start = Instant::now();
            s.tokens = tokens;
        });
        if let Some(bar) = &self.bar {
            bar.reset();
        }
    }

    /// `done` of the `total` layers are finished.
    pub fn layer_done(&self, done: u64) {
        self.with_state(|s| {
            let elapsed = s.start.elapsed();
            let rate = tokens_per_second(s.tokens, done, self.total, elapsed);
            let msg = format!(
                "· {} tokens/s · peak {}",
                rate_label(rate),
                peak_memory_label()
            );
            if let Some(bar) = &self.bar {
                bar.set_position(done);
                bar.set_message(msg);
                return;
            }
            let due = s.last_line.is_none_or(|t| t.elapsed() >= LINE_EVERY);
            if elapsed >= QUIET_FOR && due && done < self.total {
                let eta = elapsed.mul_f64((self.total - done) as f64 / done.max(1) as f64);
                eprintln!(
                    "hsdiff: {}: {done}/{} layers {msg} · ETA {}",
                    self.label,
                    self.total,
                    duration_label(eta)
                );
                s.last_line = Some(Instant::now());
            }
        });
    }

    /// The pass is over: clears the bar; a long pass prints its wall time and peak memory.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        self.with_state(|s| {
            let wall = s.start.elapsed();
            if wall >= QUIET_FOR {
                eprintln!(
                    "hsdiff: {}: {} layers, {} tokens in {} ({} tokens/s), peak memory {}",
                    self.label,
                    self.total,
                    s.tokens,
                    duration_label(wall),
                    rate_label(s.tokens as f64 / wall.as_secs_f64()),
                    peak_memory_label()
                );
            }
        });
    }

    fn with_state(&self, f: impl FnOnce(&mut State)) {
        if let Some(state) = &self.state {
            // A poisoned lock only means another thread panicked while drawing; keep going.
            let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut s);
        }
    }
}

/// Tokens per second of the whole pass, projected from `done` of `total` layers.
fn tokens_per_second(tokens: usize, done: u64, total: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if done == 0 || secs <= 0.0 {
        return 0.0;
    }
    tokens as f64 * done as f64 / (total.max(1) as f64 * secs)
}

/// Three significant digits: slow f64 passes of big models run at a fraction of a token/s.
fn rate_label(r: f64) -> String {
    if r >= 100.0 || r == 0.0 {
        format!("{r:.0}")
    } else {
        let decimals = (2 - r.log10().floor() as i32).clamp(0, 6) as usize;
        format!("{r:.decimals$}")
    }
}

fn duration_label(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

/// Peak resident memory of this process so far, in bytes (`VmHWM` of /proc/self/status; `None`
/// where there is no procfs).
pub fn peak_rss_bytes() -> Option<u64> {
    crate::util::sysinfo::own_status_kib("VmHWM").map(|kib| kib * 1024)
}

fn peak_memory_label() -> String {
    match peak_rss_bytes() {
        Some(b) => format!("{:.2} GB", b as f64 / 1e9),
        None => "unknown".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_per_second_projects_the_whole_pass() {
        // 16 tokens, a quarter of the layers in 2 s: the pass will take 8 s.
        let r = tokens_per_second(16, 16, 64, Duration::from_secs(2));
        assert!((r - 2.0).abs() < 1e-12);
        assert_eq!(tokens_per_second(16, 0, 64, Duration::from_secs(2)), 0.0);
    }

    #[test]
    fn rates_keep_three_significant_digits() {
        assert_eq!(rate_label(1234.4), "1234");
        assert_eq!(rate_label(12.345), "12.3");
        assert_eq!(rate_label(0.02654), "0.0265");
        assert_eq!(rate_label(0.0), "0");
    }

    #[test]
    fn durations_read_as_seconds_minutes_or_hours() {
        assert_eq!(duration_label(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(duration_label(Duration::from_secs(125)), "2m05s");
        assert_eq!(duration_label(Duration::from_secs(7380)), "2h03m");
    }

    #[test]
    fn peak_rss_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(peak_rss_bytes().is_some_and(|b| b > 0));
        }
    }
}
