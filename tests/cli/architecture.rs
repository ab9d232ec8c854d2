//! The module layering of docs/architecture.md, enforced: every top-level module of src/ sits in
//! one layer, imports only from its own layer or earlier ones, nothing imports `cli` (`main.rs`
//! aside), and there is no import circle between top-level modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// docs/architecture.md's layers, first to last (change both together).
const LAYERS: &[&[&str]] = &[
    &[
        "error",
        "escape",
        "limits",
        "sysinfo",
        "input",
        "device",
        "progress",
        "mapped",
        "output",
        "safetensors_file",
        "fp8",
    ],
    &[
        "config",
        "checkpoint",
        "random_weights",
        "backends",
        "testdata",
    ],
    &["fingerprint", "capture", "envdiff"],
    &["model", "builtin"],
    &[
        "compare",
        "formats",
        "metrics",
        "alignment",
        "verdict",
        "report",
        "plausibility",
    ],
    &[
        "session",
        "run",
        "planner",
        "live",
        "pairing",
        "compare_tokens",
        "disjoint",
        "compare_pair",
        "dataset",
        "check",
        "paths",
        "selftest",
        "bench",
    ],
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

#[test]
fn the_source_keeps_the_documented_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = import_graph(&src);
    assert!(graph.len() > 20, "read only {} modules", graph.len());
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
    edge(&mut g, "capture", "envdiff");
    edge(&mut g, "envdiff", "capture");
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

/// The integration tests are four binaries (tests/<group>/main.rs, docs/architecture.md#tests):
/// every other file under tests/ that cargo would build is a module its group's main.rs declares
/// (a file nobody declares is silently never compiled), and no test file sits at tests/ itself
/// (cargo would build it as a fifth binary, linking the whole crate again).
#[test]
fn tests_are_four_binaries_and_every_test_file_is_a_module_of_one() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut groups = BTreeSet::new();
    let mut stray = Vec::new();
    for entry in std::fs::read_dir(&tests).expect("read tests/") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if path.is_file() && name.ends_with(".rs") {
            stray.push(format!("tests/{name} would be a binary of its own"));
        }
        let main = path.join("main.rs");
        if !main.is_file() {
            continue;
        }
        groups.insert(name.clone());
        let text = std::fs::read_to_string(&main).expect("read main.rs");
        for file in std::fs::read_dir(&path).expect("read a group") {
            let file = file.expect("dir entry").path();
            let Some(module) = file
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".rs"))
            else {
                continue;
            };
            if module != "main" && !text.lines().any(|l| l.trim() == format!("mod {module};")) {
                stray.push(format!(
                    "tests/{name}/{module}.rs is not declared in its main.rs"
                ));
            }
        }
    }
    assert!(stray.is_empty(), "{}", stray.join("\n"));
    assert!(
        (1..=4).contains(&groups.len()),
        "{} test binaries: {groups:?}",
        groups.len()
    );
}
