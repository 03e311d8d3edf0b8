//! The key reference: the committed page is the schema's rendering, and
//! every key of the schema is on it.

use super::*;

#[test]
fn the_key_reference_is_rendered_from_the_schema() {
    let schema: Value =
        serde_json::from_str(&read(&root().join(SCHEMA))).expect("the schema is JSON");
    let rendered = render(&schema);
    let page = root().join(PAGE);
    if std::env::var_os("UPDATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(&page, &rendered).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        return;
    }
    let committed = std::fs::read_to_string(&page).unwrap_or_default();
    if committed != rendered {
        let line = committed
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(rendered.lines().count()));
        panic!(
            "{PAGE} is stale (it first differs at line {}): run `UPDATE_DOCS=1 cargo test --test it docs_reference`",
            line + 1
        );
    }
}

#[test]
fn every_key_of_the_schema_is_on_the_page() {
    let schema: Value = serde_json::from_str(&read(&root().join(SCHEMA))).unwrap();
    let page = render(&schema);
    let mut keys = Vec::new();
    collect_keys(&schema, &mut keys);
    let defs = schema["$defs"].as_object().unwrap();
    for def in defs.values() {
        collect_keys(def, &mut keys);
    }
    assert!(keys.len() > 40, "found only {} keys", keys.len());
    for key in keys {
        assert!(
            page.contains(&format!("`{key}`")),
            "`{key}` is missing from the rendering"
        );
    }
}

fn collect_keys(schema: &Value, keys: &mut Vec<String>) {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        keys.extend(properties.keys().cloned());
    }
}
