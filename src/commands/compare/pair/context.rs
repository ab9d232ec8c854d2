//! One pair being compared: its two files, its options, and the notes that go both to stderr
//! and into the report — one call ([`Notes::note`]) so that what the user is told as it happens
//! and what the report keeps cannot drift apart.

use crate::commands::compare::pair::PairOptions;
use crate::formats::FileSource;
use crate::util::escape::one_line;

/// The pair's state as its steps run: the files (read, renamed, cut to the positions both
/// hold) and the notes so far.
pub(super) struct Pair<'o> {
    pub a: FileSource,
    pub b: FileSource,
    pub opts: &'o PairOptions,
    /// Beside the files rather than a method of the pair, so that a note can be made while a
    /// step still borrows a file.
    pub notes: Notes,
}

impl<'o> Pair<'o> {
    pub fn new(a: FileSource, b: FileSource, opts: &'o PairOptions) -> Self {
        Pair {
            a,
            b,
            opts,
            notes: Notes {
                verbose: opts.verbose,
                lines: Vec::new(),
            },
        }
    }

    /// Side `side`'s file ("A" or "B").
    pub fn side(&self, side: &str) -> &FileSource {
        if side == "A" { &self.a } else { &self.b }
    }

    pub fn side_mut(&mut self, side: &str) -> &mut FileSource {
        if side == "A" {
            &mut self.a
        } else {
            &mut self.b
        }
    }
}

/// What the pair tells stderr (when verbose; a dataset's pairs are quiet) and records for the
/// report, in the order it happens.
pub(super) struct Notes {
    verbose: bool,
    lines: Vec<String>,
}

impl Notes {
    /// Tells stderr and records in the report.
    pub fn note(&mut self, note: String) {
        self.say(&note);
        self.record(note);
    }

    /// [`Notes::note`] where stderr names the file (`A (path): …`) and the report the side only.
    pub fn note_as(&mut self, told: &str, recorded: String) {
        self.say(told);
        self.record(recorded);
    }

    /// Tells stderr only: progress, no finding about the files.
    pub fn say(&self, line: &str) {
        if self.verbose {
            eprintln!("hsdiff: {}", one_line(line));
        }
    }

    /// Records in the report only: what the report's headline or table already says in its
    /// own words, or what a stderr line would tell before a later error in the same run.
    pub fn record(&mut self, note: String) {
        self.lines.push(note);
    }

    /// The notes recorded so far, for the report.
    pub fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.lines)
    }
}
