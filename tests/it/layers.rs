//! The architecture as the crate graph (crates/README.md): what each layer
//! may not depend on, checked on the resolved graph `cargo metadata` gives,
//! so a dependency that breaks a rule fails here even before any code uses
//! it. A rule broken in code without the dependency does not build.
//!
//! - `supervise-core` is pure: nothing of tokio, libc, nix, mio or socket2,
//!   nor the effects, however indirectly; and its code reads no clock.
//! - `supervise-model` is the vocabulary: it depends on none of our crates
//!   and on nothing that reaches the system (tokio, libc, nix).
//! - `supervise-config` and `supervise-effects` never depend on the core.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The platform the tests run on (`x86_64-unknown-linux-gnu`): the graph is
/// the one built here, not one with every other platform's dependencies.
fn host_platform() -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_string()
}

/// The resolved graph: each package name to the names of its normal
/// (not dev, not build) dependencies.
fn normal_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .args(["--filter-platform", &host_platform()])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata is JSON");
    let names: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let mut graph = BTreeMap::new();
    for node in metadata["resolve"]["nodes"]
        .as_array()
        .expect("a resolved graph")
    {
        let name = names[node["id"].as_str().unwrap()].to_string();
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|dep| {
                dep["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|kind| kind["kind"].is_null())
            })
            .map(|dep| names[dep["pkg"].as_str().unwrap()].to_string());
        graph.entry(name).or_insert_with(BTreeSet::new).extend(deps);
    }
    graph
}

/// Every package `name` depends on, directly or not, with the path to each.
fn closure(graph: &BTreeMap<String, BTreeSet<String>>, name: &str) -> BTreeMap<String, String> {
    let mut reached = BTreeMap::new();
    let mut todo = vec![(name.to_string(), name.to_string())];
    while let Some((package, path)) = todo.pop() {
        for dep in graph.get(&package).into_iter().flatten() {
            if !reached.contains_key(dep) {
                let path = format!("{path} → {dep}");
                reached.insert(dep.clone(), path.clone());
                todo.push((dep.clone(), path));
            }
        }
    }
    reached
}

/// The rules broken in `graph`, in words.
fn broken_rules(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let rules: [(&str, &[&str]); 4] = [
        (
            "supervise-core",
            &[
                "supervise-effects",
                "supervise-config",
                "tokio",
                "libc",
                "nix",
                "mio",
                "socket2",
            ],
        ),
        (
            "supervise-model",
            &[
                "supervise-config",
                "supervise-core",
                "supervise-effects",
                "tokio",
                "libc",
                "nix",
            ],
        ),
        ("supervise-config", &["supervise-core", "supervise-effects"]),
        ("supervise-effects", &["supervise-core"]),
    ];
    let mut broken = Vec::new();
    for (package, forbidden) in rules {
        let reached = closure(graph, package);
        for name in forbidden {
            if let Some(path) = reached.get(*name) {
                broken.push(format!("{package} must not depend on {name}: {path}"));
            }
        }
    }
    broken
}

#[test]
fn the_crate_graph_keeps_the_layers() {
    let graph = normal_dependencies();
    for crate_name in [
        "supervise-model",
        "supervise-config",
        "supervise-core",
        "supervise-effects",
    ] {
        assert!(
            graph.contains_key(crate_name),
            "{crate_name} is in the graph"
        );
    }
    let broken = broken_rules(&graph);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn a_dependency_that_breaks_a_rule_is_found_however_indirect() {
    let mut graph = normal_dependencies();
    // The four rules an earlier tree broke, put back as dependencies.
    let mut with = |from: &str, to: &str| {
        graph.get_mut(from).unwrap().insert(to.to_string());
    };
    with("supervise-effects", "supervise-core");
    with("supervise-config", "supervise-effects");
    with("supervise-model", "supervise-config");
    let broken = broken_rules(&graph);
    for expected in [
        "supervise-effects must not depend on supervise-core",
        "supervise-config must not depend on supervise-effects",
        "supervise-model must not depend on supervise-config",
        // Through the model, which now reaches config and the effects.
        "supervise-core must not depend on supervise-effects",
        "supervise-core must not depend on tokio",
    ] {
        assert!(
            broken.iter().any(|b| b.starts_with(expected)),
            "{expected} is not found in {broken:#?}"
        );
    }
}

#[test]
fn the_core_reads_no_clock() {
    fn sources(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("crates/core/src"), &mut files);
    sources(&root.join("crates/model/src"), &mut files);
    assert!(files.len() > 10, "the sources are found: {files:?}");
    let mut reads = Vec::new();
    for file in files {
        // Tests make instants to feed the core; its code takes them. A test
        // module is a `tests.rs`, or a `tests/` directory of topic files.
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let in_tests = file.parent().is_some_and(|dir| dir.ends_with("tests"));
        if name == "tests.rs" || name == "harness.rs" || in_tests {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (number, line) in code.lines().enumerate() {
            if ["Instant::now", "SystemTime::now", "clock_gettime"]
                .iter()
                .any(|read| line.contains(read))
                && !line.trim_start().starts_with("//")
            {
                reads.push(format!(
                    "{}:{}: {}",
                    file.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        reads.is_empty(),
        "the core reads a clock:\n{}",
        reads.join("\n")
    );
}
