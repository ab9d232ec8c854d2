//! Text from files (names, labels, fingerprint values) made safe for each place it is shown:
//! the terminal and one-line errors (control characters written as `\n`, `\x1b`, `\u{202e}`),
//! markdown (code spans sized past any backtick run, other text with every character markdown or
//! HTML acts on backslash-escaped, so nothing can open a tag or close a fence or `<details>`),
//! and plot labels (visible escapes; the SVG writer then escapes `<`, `>`, `&`, `"` itself).
//! Long strings are shortened with an ellipsis and their length in bytes.

use std::borrow::Cow;

/// Longest name, label or value shown whole, in bytes.
pub const SHORT: usize = 200;
/// Longest sentence (a summary, a note, an error line) shown whole, in bytes.
pub const LONG: usize = 4096;

/// Characters that move the cursor, change colours, reorder text or end a line: shown escaped.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{feff}'
        )
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// `s` with every control (and bidirectional-override) character written as an escape.
pub fn visible(s: &str) -> Cow<'_, str> {
    if !s.chars().any(hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if hidden(c) && (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if hidden(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A file or folder name as text that tells every two names apart: unchanged when it is UTF-8
/// without a backslash; else each byte that is not UTF-8 written `\xNN` and each backslash
/// doubled (two names that `to_string_lossy` would both show as `�` stay two).
pub fn lossless(name: &std::ffi::OsStr) -> Cow<'_, str> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = name.as_bytes();
    if let Ok(text) = std::str::from_utf8(bytes)
        && !text.contains('\\')
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        out.push_str(&chunk.valid().replace('\\', "\\\\"));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    Cow::Owned(out)
}

/// A path as text, each of its bytes kept distinguishable ([`lossless`]).
pub fn path_text(path: &std::path::Path) -> String {
    lossless(path.as_os_str()).into_owned()
}

/// `s` cut to about `max` bytes (on a character boundary) with `…` and its full length.
pub fn shorten(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes)", &s[..end], s.len()))
}

/// A value for the terminal or a plot label: visible escapes, at most `max` bytes shown.
pub fn plain(s: &str, max: usize) -> String {
    visible(&shorten(s, max)).into_owned()
}

/// An error message as one line.
pub fn one_line(s: &str) -> String {
    plain(s, LONG)
}

/// Text for markdown outside code spans (a sentence, a table cell): visible escapes, shortened,
/// and every character that can open a tag, an entity, a link, emphasis or a code span, or end
/// a table cell, backslash-escaped (CommonMark renders `\<` as `<`, never as a tag). `_`, `#`
/// and parentheses are left alone: inside a word, a sentence or a cell they do nothing, and
/// names like `fast_path` stay readable in the raw text.
pub fn markdown_text(s: &str, max: usize) -> String {
    let s = plain(s, max);
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if "\\`*[]<>|~&".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A markdown code span holding `s` verbatim (visible escapes, shortened): delimited by one
/// backtick more than the longest run inside, padded with spaces when `s` starts or ends with a
/// backtick. `in_table`: a `|` is escaped, which GitHub's tables require even inside code.
pub fn markdown_code(s: &str, max: usize, in_table: bool) -> String {
    let s = plain(s, max);
    let s = if in_table { s.replace('|', "\\|") } else { s };
    let fence = "`".repeat(longest_run(&s, '`') + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') || s.is_empty() {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// A fenced markdown code block holding `s` (one line per line of `s`, control characters
/// escaped): the fence is longer than any backtick run in `s`, so `s` cannot close it.
pub fn markdown_block(s: &str, max: usize) -> String {
    let lines: Vec<String> = shorten(s, max).lines().map(|l| plain(l, max)).collect();
    let body = lines.join("\n");
    let fence = "`".repeat((longest_run(&body, '`') + 1).max(3));
    format!("{fence}\n{body}\n{fence}\n")
}

fn longest_run(s: &str, c: char) -> usize {
    let (mut best, mut run) = (0, 0);
    for x in s.chars() {
        run = if x == c { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// The hostile strings every sink is tested with (also used by the renderers' tests).
    pub const HOSTILE: &[&str] = &[
        "layers.1\x1b[31mRED\x1b[0m",
        "line\nbreak",
        "```\n# heading",
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "</details><details open>",
        "a|b|c",
        "`tick` and ``two``",
        "\u{202e}txt.exe",
        "tab\there\r",
    ];

    #[test]
    fn control_characters_become_visible_escapes() {
        assert_eq!(visible("a\nb\x1b[0m\t"), "a\\nb\\x1b[0m\\t");
        assert_eq!(visible("\u{202e}x"), "\\u{202e}x");
        assert_eq!(visible("plain"), "plain");
        for s in HOSTILE {
            assert!(!one_line(s).chars().any(hidden), "{s:?}");
        }
    }

    #[test]
    fn names_that_are_not_utf8_stay_distinguishable() {
        use std::os::unix::ffi::OsStrExt;
        let os = |b: &[u8]| std::ffi::OsStr::from_bytes(b).to_os_string();
        assert_eq!(lossless(&os(b"data_\xff.pt")), "data_\\xff.pt");
        assert_ne!(lossless(&os(b"\xfe")), lossless(&os(b"\xff")));
        // A backslash is doubled, so a name spelling an escape is not the byte it spells.
        assert_eq!(lossless(&os(b"a\\xff")), "a\\\\xff");
        assert_eq!(lossless(&os("plain é".as_bytes())), "plain é");
    }

    #[test]
    fn long_strings_are_shortened_with_their_length() {
        let long = "é".repeat(3000);
        let short = shorten(&long, 101);
        assert!(short.ends_with("… (6000 bytes)"), "{short}");
        assert!(short.len() < 120);
        assert_eq!(shorten("abc", 3), "abc");
    }

    /// Whether `md` holds one of `chars` that no backslash escapes.
    pub fn unescaped(md: &str, chars: &str) -> bool {
        let mut it = md.chars();
        while let Some(c) = it.next() {
            if c == '\\' {
                it.next();
            } else if chars.contains(c) {
                return true;
            }
        }
        false
    }

    #[test]
    fn markdown_text_cannot_open_a_tag_or_leave_its_cell() {
        for s in HOSTILE {
            let md = markdown_text(s, SHORT);
            assert!(!unescaped(&md, "<>|`*[]&"), "{md}");
            assert!(!md.contains('\n'), "{md}");
        }
        assert_eq!(markdown_text("a<b", SHORT), "a\\<b");
    }

    #[test]
    fn code_spans_outlast_the_backticks_inside() {
        assert_eq!(markdown_code("x", SHORT, false), "`x`");
        assert_eq!(markdown_code("a`b", SHORT, false), "``a`b``");
        assert_eq!(markdown_code("`a", SHORT, false), "`` `a ``");
        assert_eq!(markdown_code("a|b", SHORT, true), "`a\\|b`");
        let block = markdown_block("hsdiff compare '```' x", 1000);
        assert!(
            block.starts_with("````\n") && block.ends_with("\n````\n"),
            "{block}"
        );
    }
}
