//! The book's pages and links: every page `SUMMARY.md` lists exists and
//! every page is listed; every relative link leads to a file and heading that
//! exist, as mdBook reads them.

use super::*;

/// The markdown files of the book, and README.md.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    walk(&root().join(BOOK), &mut files);
    files.sort();
    files
}

/// The lines of a markdown file outside fenced code blocks, with their
/// numbers.
fn outside_fences(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(marker) = fence {
            if trimmed.starts_with(marker) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(&trimmed[..3]);
            continue;
        }
        out.push((i + 1, line));
    }
    out
}

/// The lines outside fenced code blocks, inline code spans blanked out:
/// where a link can be.
fn prose(text: &str) -> Vec<(usize, String)> {
    outside_fences(text)
        .into_iter()
        .map(|(number, line)| (number, blank_code_spans(line)))
        .collect()
}

fn blank_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The targets of the links on a line: `[text](target)`, `[label]: target`,
/// and `href="…"` / `src="…"`.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let mut depth = 0;
        let end = after
            .char_indices()
            .find(|&(_, c)| match c {
                '(' => {
                    depth += 1;
                    false
                }
                ')' if depth == 0 => true,
                ')' => {
                    depth -= 1;
                    false
                }
                _ => false,
            })
            .map_or(after.len(), |(j, _)| j);
        let target = after[..end].trim();
        // `[text](<a b> "title")`: the target without its title.
        let target = target.split_once(" \"").map_or(target, |(t, _)| t);
        targets.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some((label, target)) = trimmed.split_once("]:")
        && !label.contains("](")
        && let Some(target) = target.split_whitespace().next()
    {
        targets.push(target.to_string());
    }
    for attribute in ["href=\"", "src=\""] {
        let mut rest = line;
        while let Some(i) = rest.find(attribute) {
            let after = &rest[i + attribute.len()..];
            let end = after.find('"').unwrap_or(after.len());
            targets.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    targets
}

fn is_external(target: &str) -> bool {
    target.is_empty()
        || target.starts_with('#')
        || target.split_once(':').is_some_and(|(scheme, _)| {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        })
}

/// `a/./b/../c` → `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The ids of a page's headings, as mdBook makes them: an explicit
/// `{#id}`, else the heading's text lowercased, spaces made `-`, everything
/// but letters, digits, `-` and `_` dropped (a repeated one gets `-1`, `-2` …).
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for (_, line) in outside_fences(text) {
        let line = line.replace('`', "");
        let Some(heading) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let heading = heading.trim();
        let id = match heading.rsplit_once("{#") {
            Some((_, id)) if heading.ends_with('}') => id.trim_end_matches('}').trim().to_string(),
            _ => {
                let text = strip_links(heading);
                text.chars()
                    .filter_map(|c| {
                        if c.is_alphanumeric() || c == '_' || c == '-' {
                            Some(c.to_lowercase().next().unwrap_or(c))
                        } else if c.is_whitespace() {
                            Some('-')
                        } else {
                            None
                        }
                    })
                    .collect()
            }
        };
        let mut unique = id.clone();
        let mut n = 1;
        while !ids.insert(unique.clone()) {
            unique = format!("{id}-{n}");
            n += 1;
        }
    }
    ids
}

/// `[text](target)` → `text`.
fn strip_links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](") else {
            break;
        };
        let Some(end) = rest[open + close..].find(')') else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..open + close]);
        rest = &rest[open + close + end + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn every_page_of_the_summary_exists_and_every_page_is_in_it() {
    let book = root().join(BOOK);
    let summary = read(&book.join("SUMMARY.md"));
    let mut listed = BTreeSet::new();
    let mut problems = Vec::new();
    for (number, line) in prose(&summary) {
        for target in link_targets(&line) {
            if target.is_empty() {
                continue; // a draft chapter: `[Title]()`
            }
            let path = normalize(&book.join(&target));
            if !path.is_file() {
                problems.push(format!("SUMMARY.md:{number}: `{target}` does not exist"));
            }
            listed.insert(path);
        }
    }
    assert!(
        listed.len() >= 20,
        "SUMMARY.md lists only {} pages",
        listed.len()
    );
    for file in markdown_files() {
        if file.starts_with(&book)
            && file.file_name().is_some_and(|n| n != "SUMMARY.md")
            && !listed.contains(&normalize(&file))
        {
            problems.push(format!(
                "{} is not in SUMMARY.md (mdbook would leave it out)",
                file.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_relative_link_leads_to_a_file_and_heading_that_exist() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = read(&file);
        let dir = file.parent().unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        let mut lines = prose(&text);
        // `{{#include FILE}}` (mdBook's) must name a file too.
        for (number, line) in &mut lines {
            while let Some(i) = line.find("{{#include ") {
                let after = &line[i + "{{#include ".len()..];
                let end = after.find("}}").unwrap_or(after.len());
                let target = after[..end]
                    .trim()
                    .split(':')
                    .next()
                    .unwrap_or("")
                    .to_string();
                if !dir.join(&target).is_file() {
                    problems.push(format!(
                        "{name}:{number}: the included `{target}` does not exist"
                    ));
                }
                checked += 1;
                *line = format!("{}{}", &line[..i], &after[end..]);
            }
        }
        for (number, line) in lines {
            for target in link_targets(&line) {
                if is_external(&target) {
                    if let Some(id) = target.strip_prefix('#')
                        && !heading_ids(&text).contains(id)
                    {
                        problems.push(format!("{name}:{number}: no heading `#{id}` on this page"));
                    }
                    continue;
                }
                checked += 1;
                let (path, fragment) = target
                    .split_once('#')
                    .map_or((target.as_str(), None), |(p, f)| (p, Some(f)));
                let resolved = match path.strip_prefix('/') {
                    Some(from_root) => root().join(from_root),
                    None => dir.join(path),
                };
                let resolved = normalize(&resolved);
                if !resolved.exists() {
                    problems.push(format!("{name}:{number}: `{target}` leads to no file"));
                    continue;
                }
                if let Some(id) = fragment
                    && resolved.extension().is_some_and(|e| e == "md")
                    && !heading_ids(&read(&resolved)).contains(id)
                {
                    problems.push(format!(
                        "{name}:{number}: `{target}`: {path} has no heading `#{id}`"
                    ));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} relative links found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_link_scanner_reads_what_mdbook_reads() {
    assert_eq!(
        link_targets("see [a](b.md#c) and [d](<e f.md> \"t\")"),
        ["b.md#c", "e f.md"]
    );
    assert_eq!(link_targets("[x]: ../y.md"), ["../y.md"]);
    assert_eq!(blank_code_spans("`[a](b)` [c](d)").trim(), "[c](d)");
    assert!(is_external("https://example.org") && is_external("#top") && !is_external("a.md"));
    let ids = heading_ids(
        "# A `b` c\n## Cluster mode: one port\n## X {#custom}\n# A b c\n```\n# not\n```\n",
    );
    assert_eq!(
        ids,
        ["a-b-c", "a-b-c-1", "cluster-mode-one-port", "custom"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    let (text, default) = split_default("Working directory. Default: that folder.");
    assert_eq!(
        (text.as_str(), default.as_deref()),
        ("Working directory.", Some("that folder"))
    );
    let (text, default) = split_default("Default 1s. Then more.");
    assert_eq!(
        (text.as_str(), default.as_deref()),
        ("Then more.", Some("1s"))
    );
}
