//! Every key of the file format (walked from the JSON Schema) is exported or
//! warned about, for both engines: the check of the [`cases::CASES`] table.

use super::*;
use cases::CASES;

mod cases;

/// Every key of the file format, as dotted paths (`backoff.max`), walked
/// from the JSON Schema the loader checks files against: app keys, the
/// fixed keys of their blocks (through `$ref`s, `anyOf`s and list items),
/// and the top-level keys besides `apps` and `defaults`.
fn schema_keys() -> Vec<String> {
    let schema = config::json_schema();
    let defs = schema["$defs"].clone();
    fn walk(
        node: &serde_json::Value,
        defs: &serde_json::Value,
        prefix: &str,
        keys: &mut Vec<String>,
        depth: usize,
    ) {
        if depth > 8 {
            return;
        }
        if let Some(reference) = node["$ref"].as_str() {
            let name = reference.trim_start_matches("#/$defs/");
            walk(&defs[name], defs, prefix, keys, depth + 1);
        }
        for alternative in ["anyOf", "oneOf", "allOf"] {
            for option in node[alternative].as_array().into_iter().flatten() {
                walk(option, defs, prefix, keys, depth + 1);
            }
        }
        if node.get("items").is_some() {
            walk(&node["items"], defs, prefix, keys, depth + 1);
        }
        for (key, value) in node["properties"].as_object().into_iter().flatten() {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            if !keys.contains(&path) {
                keys.push(path.clone());
            }
            walk(value, defs, &path, keys, depth + 1);
        }
    }
    let mut keys = Vec::new();
    walk(&defs["AppFields"], &defs, "", &mut keys, 0);
    for top in schema["properties"]
        .as_object()
        .expect("top-level properties")
        .keys()
    {
        if top != "apps" && top != "defaults" {
            keys.push(top.clone());
        }
    }
    keys
}

/// What an export must do with a key.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// The output contains this text.
    Maps(&'static str),
    /// A warning containing this text, placed on the key's line (or on its
    /// block's line, for a block that is lost as a whole).
    Warns(&'static str),
}

struct Case {
    key: &'static str,
    /// The ecosystem file; `key`'s last segment is written on a line of
    /// its own, after its block's key.
    yaml: &'static str,
    kubernetes: Expect,
    systemd: Expect,
}

const fn case(key: &'static str, yaml: &'static str, kubernetes: Expect, systemd: Expect) -> Case {
    Case {
        key,
        yaml,
        kubernetes,
        systemd,
    }
}

use Expect::{Maps, Warns};

/// The 1-based line where `key`'s last segment is written: the first line
/// with `SEGMENT:` after the lines of the segments before it.
fn line_of(yaml: &str, key: &str) -> (usize, usize) {
    let mut from = 0;
    let mut block_line = 0;
    let mut line = 0;
    let segments: Vec<&str> = key.split('.').collect();
    for (index, segment) in segments.iter().enumerate() {
        let needle = format!("{segment}:");
        let found = yaml
            .lines()
            .enumerate()
            .skip(from)
            .find(|(_, text)| {
                let text = text.trim_start().trim_start_matches("- ");
                text.starts_with(&needle)
            })
            .unwrap_or_else(|| panic!("`{segment}:` is written in the case of {key}:\n{yaml}"))
            .0;
        if index + 1 < segments.len() {
            block_line = found + 1;
        }
        line = found + 1;
        from = found + 1;
    }
    (line, if segments.len() > 1 { block_line } else { line })
}

/// What one key case found wrong, and what `export kubernetes` wrote for it.
type CaseFindings = (Vec<String>, Option<String>);

/// What [`every_key_of_the_format_is_exported_or_warned_about`] finds
/// wrong with one case, and what `export kubernetes` wrote for it (to
/// validate with the others).
fn check_case(case: &Case) -> CaseFindings {
    let mut failures = Vec::new();
    let mut objects = None;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("ecosystem.yaml"), case.yaml).unwrap();
    std::fs::write(dir.path().join("app.env"), "FROM_FILE=yes-it-is\n").unwrap();
    let (line, block_line) = line_of(case.yaml, case.key);
    // Each case's units pass systemd-analyze verify, and its objects
    // the Kubernetes schemas, whatever the key does.
    let (written, units) = export_units(dir.path());
    if written.code == 0 {
        let complaints = systemd_verify(&units);
        if !complaints.is_empty() {
            failures.push(format!(
                "{} / systemd-analyze verify:\n{}",
                case.key,
                complaints.join("\n")
            ));
        }
    }
    for (target, expect) in [("kubernetes", case.kubernetes), ("systemd", case.systemd)] {
        let run = supervise(dir.path(), &["export", target]);
        if run.code != 0 {
            failures.push(format!(
                "{} / {target}: exit {}\n{}",
                case.key, run.code, run.stderr
            ));
            continue;
        }
        if target == "kubernetes" {
            objects = Some(run.stdout.clone());
        }
        match expect {
            Maps(text) => {
                if !run.stdout.contains(text) {
                    failures.push(format!(
                        "{} / {target}: the output lacks {text:?}\n{}",
                        case.key, run.stdout
                    ));
                }
            }
            Warns(text) => {
                let placed = run.stderr.lines().any(|l| {
                    (l.starts_with(&format!("ecosystem.yaml:{line}:"))
                        || l.starts_with(&format!("ecosystem.yaml:{block_line}:")))
                        && l.contains(": warning: ")
                        && l.contains(text)
                });
                if !placed {
                    failures.push(format!(
                        "{} / {target}: no warning {text:?} at line {line} (or {block_line})\n{}",
                        case.key, run.stderr
                    ));
                }
                // A lost key fails --strict.
                let strict = supervise(dir.path(), &["export", target, "--strict"]);
                if strict.code != 1 {
                    failures.push(format!(
                        "{} / {target}: --strict exited {}",
                        case.key, strict.code
                    ));
                }
            }
        }
    }
    (failures, objects)
}

#[test]
fn every_key_of_the_format_is_exported_or_warned_about() {
    let keys = schema_keys();
    let covered: Vec<&str> = CASES.iter().map(|c| c.key).collect();
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| !covered.contains(&k.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "keys of the format that no case covers (add a row to CASES, and make \
         the exports map or warn about them): {missing:?}"
    );
    let stale: Vec<&&str> = covered
        .iter()
        .filter(|k| !keys.iter().any(|key| key == *k))
        .collect();
    assert!(
        stale.is_empty(),
        "cases for keys the format does not have: {stale:?}"
    );
    assert!(
        keys.len() >= 50,
        "the schema walk found the nested keys too: {keys:?}"
    );

    // The cases run on as many threads as there are cores (each is a few
    // short processes: the exports and systemd-analyze), their findings
    // kept in the order of CASES.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut checked: Vec<(usize, CaseFindings)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(case) = CASES.get(i) else {
                            return done;
                        };
                        done.push((i, check_case(case)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().expect("a case panicked"))
            .collect()
    });
    checked.sort_by_key(|(i, _)| *i);
    let mut failures = Vec::new();
    // What `export kubernetes` wrote for each case, validated all at once
    // (one run of the validator instead of one per case).
    let mut objects = Vec::new();
    for (i, (found, written)) in checked {
        failures.extend(found);
        if let Some(written) = written {
            objects.push((CASES[i].key, written));
        }
    }
    let streams: Vec<&str> = objects.iter().map(|(_, yaml)| yaml.as_str()).collect();
    for ((key, _), report) in objects.iter().zip(validate_kubernetes_each(&streams)) {
        if let Err(report) = report {
            failures.push(format!("{key} / kubernetes-validate:\n{report}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
