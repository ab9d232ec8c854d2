//! Messages keep their words one space apart: a string literal of src/ broken over lines without
//! a trailing `\` keeps the newline and the next line's indentation, which an error or a note
//! then prints as a run of spaces. Every plain string literal of src/ (raw strings aside), its
//! `\`-continued line breaks removed, holds no newline and no run of 8 or more spaces.

use std::path::Path;

/// The plain string literals of `code` (comments, char literals and raw strings skipped) as
/// (line, text between the quotes).
fn string_literals(code: &str) -> Vec<(usize, String)> {
    let c: Vec<char> = code.chars().collect();
    let line_at = |i: usize| c[..i].iter().filter(|&&ch| ch == '\n').count() + 1;
    let at = |k: usize| c.get(k).copied();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '/' if at(i + 1) == Some('/') => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '/' if at(i + 1) == Some('*') => {
                i += 2;
                while i + 1 < c.len() && !(c[i] == '*' && c[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            // A char literal ('x', '\n', '\u{..}'); a lifetime has no closing quote.
            '\'' => {
                let close = if at(i + 1) == Some('\\') {
                    (i + 2..c.len().min(i + 12)).find(|&k| c[k] == '\'')
                } else {
                    (at(i + 2) == Some('\'')).then_some(i + 2)
                };
                i = close.map_or(i + 1, |k| k + 1);
            }
            'r' if (at(i + 1) == Some('"') || at(i + 1) == Some('#'))
                && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_')) =>
            {
                let hashes = (i + 1..c.len()).take_while(|&k| c[k] == '#').count();
                if c.get(i + 1 + hashes) != Some(&'"') {
                    i += 1;
                    continue;
                }
                let close: String = std::iter::once('"')
                    .chain("#".repeat(hashes).chars())
                    .collect();
                let body: String = c[i + 2 + hashes..].iter().collect();
                let end = body.find(&close).map_or(body.len(), |e| e + close.len());
                i += 2 + hashes + body[..end].chars().count();
            }
            '"' => {
                let start = i;
                let mut text = String::new();
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' && at(i + 1) == Some('\n') {
                        // A continued line: the break and the next line's indentation go.
                        i += 2;
                        while i < c.len() && c[i].is_whitespace() {
                            i += 1;
                        }
                        continue;
                    }
                    if c[i] == '\\' {
                        text.push(c[i]);
                        i += 1;
                    }
                    if i < c.len() {
                        text.push(c[i]);
                    }
                    i += 1;
                }
                out.push((line_at(start), text));
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// The literals of `code` that would print a line break or a run of 8+ spaces.
fn spaced(code: &str) -> Vec<(usize, String)> {
    string_literals(code)
        .into_iter()
        .filter(|(_, t)| t.contains('\n') || t.contains(&" ".repeat(8)))
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_message_literal_carries_a_line_break_or_a_run_of_spaces() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 100, "read only {} files", files.len());
    let mut bad = Vec::new();
    for f in &files {
        let code = std::fs::read_to_string(f).expect("read a source file");
        for (line, text) in spaced(&code) {
            bad.push(format!("{}:{line}: {text:?}", f.display()));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn a_literal_broken_without_a_backslash_is_found() {
    let code = "fn f() {\n    // \"a comment,        no literal\"\n    let c = '\"';\n    \
                let ok = \"one \\\n        line\";\n    let raw = r#\"two\n        lines\"#;\n    \
                let bad = \"two\n        lines\";\n    let wide = \"a        b\";\n}\n";
    let found: Vec<usize> = spaced(code).into_iter().map(|(line, _)| line).collect();
    assert_eq!(found, [8, 10], "{code}");
}
