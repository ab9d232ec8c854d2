//! The module layering of docs/architecture.md, enforced: every top-level module of src/ sits in
//! one layer, imports only from its own layer or earlier ones, nothing imports `cli` (`main.rs`
//! aside), and there is no import circle between top-level modules. Two rules of the job model
//! too: a report is assembled in one place (`src/job/`), and the command line holds no logic
//! (short files that import no engine module).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// docs/architecture.md's layers, first to last (change both together): each is a folder of
/// src/ (lib.rs groups them the same way).
const LAYERS: &[&[&str]] = &[
    &["error", "fp8", "util"],
    &["backends", "weights"],
    &["capture"],
    &["model"],
    &["compare", "formats", "report"],
    &["printer"],
    &["job"],
    &["commands"],
    &["cli"],
];

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Top-level module → the top-level modules its files name as `crate::X` (comments skipped).
fn import_graph(src: &Path) -> Graph {
    let mut graph = Graph::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src/") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src/");
            let first = rel.components().next().expect("a component");
            let top = first
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string();
            if top == "main" || top == "lib" {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read a source file");
            let targets = graph.entry(top.clone()).or_default();
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or_default();
                for (at, _) in code.match_indices("crate::") {
                    let name: String = code[at + "crate::".len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() && name != top {
                        targets.insert(name);
                    }
                }
            }
        }
    }
    graph
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// Every breach of the three rules, in words.
fn violations(graph: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for (from, targets) in graph {
        let Some(lf) = layer_of(from) else {
            out.push(format!("`{from}` is in no layer (docs/architecture.md)"));
            continue;
        };
        for to in targets {
            match layer_of(to) {
                _ if to == "cli" && from != "cli" => out.push(format!("`{from}` imports `cli`")),
                Some(lt) if lt > lf => out.push(format!(
                    "`{from}` (layer {}) imports `{to}` from a later layer ({})",
                    lf + 1,
                    lt + 1
                )),
                _ => {}
            }
        }
    }
    // A circle: depth-first search for an edge back onto the current path.
    fn visit(
        n: &str,
        g: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<String> {
        if let Some(i) = path.iter().position(|p| p == n) {
            return Some(format!("{} → {n}", path[i..].join(" → ")));
        }
        if !done.insert(n.to_string()) {
            return None;
        }
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, graph, &mut Vec::new(), &mut done) {
            out.push(format!("import circle: {c}"));
        }
    }
    out
}

/// The entries of `dir`, each with its file name.
fn entries(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("dir entry").path();
            let name = path
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            (path, name)
        })
        .collect()
}

/// src/ holds the layers' folders and nothing else but the crate roots, so the tree shows the
/// layers.
#[test]
fn only_the_crate_roots_sit_at_the_root_of_src() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut stray = Vec::new();
    let mut folders = BTreeSet::new();
    for (path, name) in entries(&src) {
        if path.is_dir() {
            folders.insert(name);
        } else if name != "main.rs" && name != "lib.rs" {
            stray.push(name);
        }
    }
    assert!(stray.is_empty(), "files at the root of src/: {stray:?}");
    let layered: BTreeSet<String> = LAYERS
        .iter()
        .flat_map(|l| l.iter())
        .map(|m| m.to_string())
        .collect();
    assert_eq!(folders, layered, "src/'s folders are the layers' modules");
}

#[test]
fn the_source_keeps_the_documented_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = import_graph(&src);
    assert!(graph.len() >= 10, "read only {} modules", graph.len());
    let bad = violations(&graph);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn a_planted_breach_of_each_rule_is_found() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edge = |g: &mut Graph, a: &str, b: &str| {
        g.entry(a.to_string()).or_default().insert(b.to_string());
    };
    let mut g = import_graph(&src);
    edge(&mut g, "model", "report");
    assert!(
        violations(&g)
            .iter()
            .any(|v| v.contains("`model` (layer 4) imports `report`"))
    );

    let mut g = import_graph(&src);
    edge(&mut g, "report", "cli");
    assert!(violations(&g).iter().any(|v| v == "`report` imports `cli`"));

    let mut g = import_graph(&src);
    edge(&mut g, "formats", "report");
    edge(&mut g, "report", "formats");
    assert!(
        violations(&g)
            .iter()
            .any(|v| v.starts_with("import circle"))
    );

    let mut g = import_graph(&src);
    edge(&mut g, "newcomer", "error");
    assert!(
        violations(&g)
            .iter()
            .any(|v| v.contains("`newcomer` is in no layer"))
    );
}

/// The source files under `dir` (recursively), with their text, comments dropped.
fn code_files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read a source folder") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                let code: Vec<&str> = text
                    .lines()
                    .map(|l| l.split("//").next().unwrap_or_default())
                    .collect();
                let rel = path.strip_prefix(dir).expect("under dir");
                out.push((rel.display().to_string(), code.join("\n")));
            }
        }
    }
    out
}

/// Files (relative to src/) outside `src/job/` and `src/report/` that build a report or put a
/// comparison together themselves.
fn assembly_sites(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(path, _)| !path.starts_with("job/") && !path.starts_with("report/"))
        .filter(|(_, code)| code.contains("build_report") || code.contains("Comparison {"))
        .map(|(path, _)| path.clone())
        .collect()
}

#[test]
fn a_report_is_assembled_by_the_job_alone() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = code_files(&src);
    assert!(files.iter().any(|(p, _)| p.starts_with("job/")));
    let bad = assembly_sites(&files);
    assert!(bad.is_empty(), "build_report outside src/job: {bad:?}");
    // A planted second site is found.
    let mut planted = files.clone();
    planted.push(("live.rs".to_string(), "build_report(&c)".to_string()));
    assert_eq!(assembly_sites(&planted), ["live.rs"]);
}

/// Engine modules the command line must reach only through a command's library module.
const NOT_FOR_CLI: &[&str] = &[
    "capture",
    "commands::compare::disjoint",
    "commands::compare::pair_steps",
    "commands::compare::plausibility",
    "compare",
    "formats",
    "job",
    "model",
    "weights::checkpoint",
];

/// Modules inside those folders that the command line may use: what ran (the fingerprint) and the
/// session its run options resolve into.
const FOR_CLI: &[&str] = &["capture::fingerprint", "job::session"];

/// The most lines a file of src/cli may have.
const CLI_LINES: usize = 150;

/// Each breach of "the command line turns arguments into a spec and prints".
fn cli_breaches(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, code) in files {
        let lines = code.lines().count();
        if lines > CLI_LINES {
            out.push(format!(
                "src/cli/{path}: {lines} lines (at most {CLI_LINES})"
            ));
        }
        let code = FOR_CLI.iter().fold(code.clone(), |code, allowed| {
            code.replace(&format!("crate::{allowed}"), "")
        });
        for m in NOT_FOR_CLI {
            if code.contains(&format!("crate::{m}::")) || code.contains(&format!("crate::{m};")) {
                out.push(format!("src/cli/{path} imports `{m}`"));
            }
        }
    }
    out
}

#[test]
fn the_command_line_holds_no_logic() {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
    let files = code_files(&cli);
    assert!(files.len() > 5, "read only {} files", files.len());
    let bad = cli_breaches(&files);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    let planted = vec![
        ("x.rs".to_string(), "use crate::model::Model;".to_string()),
        ("y.rs".to_string(), "\n".repeat(CLI_LINES + 1)),
    ];
    assert_eq!(cli_breaches(&planted).len(), 2);
}

/// The `.rs` files of `dir` (shown as `shown`) that its module root `root` (main.rs or mod.rs)
/// declares no `mod NAME;` for, and in turn those of each module folder (one with a mod.rs).
fn undeclared_modules(dir: &Path, root: &str, shown: &str) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join(root)).expect("read a module root");
    let mut stray = Vec::new();
    for (path, name) in entries(dir) {
        let module = if path.join("mod.rs").is_file() {
            stray.extend(undeclared_modules(
                &path,
                "mod.rs",
                &format!("{shown}/{name}"),
            ));
            name.as_str()
        } else if let Some(module) = name.strip_suffix(".rs") {
            module
        } else {
            continue;
        };
        if name != root && !text.lines().any(|l| l.trim() == format!("mod {module};")) {
            stray.push(format!("{shown}/{name} is not declared in its {root}"));
        }
    }
    stray
}

/// The integration tests are four binaries (tests/<group>/main.rs, docs/architecture.md#tests):
/// every other file under tests/ that cargo would build is a module its group's main.rs (or its
/// module folder's mod.rs) declares (a file nobody declares is silently never compiled), and no
/// test file sits at tests/ itself (cargo would build it as a fifth binary, linking the whole
/// crate again).
#[test]
fn tests_are_four_binaries_and_every_test_file_is_a_module_of_one() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut groups = BTreeSet::new();
    let mut stray = Vec::new();
    for (path, name) in entries(&tests) {
        if path.is_file() && name.ends_with(".rs") {
            stray.push(format!("tests/{name} would be a binary of its own"));
        }
        let main = path.join("main.rs");
        if !main.is_file() {
            continue;
        }
        groups.insert(name.clone());
        stray.extend(undeclared_modules(
            &path,
            "main.rs",
            &format!("tests/{name}"),
        ));
    }
    assert!(stray.is_empty(), "{}", stray.join("\n"));
    assert!(
        (1..=4).contains(&groups.len()),
        "{} test binaries: {groups:?}",
        groups.len()
    );
}
