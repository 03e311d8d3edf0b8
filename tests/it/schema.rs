//! The committed JSON Schema is the generated one, and every example and valid
//! fixture conforms to it (checked by an independent validator, `jsonschema`).

use std::path::Path;

use config::{json_schema, node};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn committed_schema_is_up_to_date() {
    let committed = std::fs::read_to_string(root().join("schemas/ecosystem.schema.json"))
        .expect("schemas/ecosystem.schema.json exists");
    let generated = format!(
        "{}\n",
        serde_json::to_string_pretty(&json_schema()).unwrap()
    );
    assert!(
        committed == generated,
        "schemas/ecosystem.schema.json is stale: run `cargo run -- schema > schemas/ecosystem.schema.json`"
    );
}

fn yaml_files() -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for example in std::fs::read_dir(root().join("examples")).unwrap() {
        let file = example.unwrap().path().join("ecosystem.yaml");
        if file.exists() {
            files.push(file);
        }
    }
    for fixture in std::fs::read_dir(root().join("tests/it/fixtures/valid")).unwrap() {
        let path = fixture.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            files.push(path);
        }
    }
    files
}

#[test]
fn examples_and_valid_fixtures_conform_to_the_schema() {
    let validator = jsonschema::validator_for(&json_schema()).expect("the schema compiles");
    let files = yaml_files();
    assert!(files.len() >= 10, "found {} files", files.len());
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let tree = node::parse(&text).unwrap_or_else(|e| panic!("{}: {e:?}", file.display()));
        let instance = tree.to_json();
        let errors: Vec<String> = validator
            .iter_errors(&instance)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", file.display());
    }
}

#[test]
fn structurally_invalid_fixtures_break_the_schema_too() {
    let validator = jsonschema::validator_for(&json_schema()).unwrap();
    for name in [
        "unknown-app-key",
        "instances-negative",
        "restart-bad-policy",
        "ready-unknown-probe",
        "env-value-list",
        "health-two-checks",
        "health-misspelt-failures",
    ] {
        let file = root().join(format!("tests/it/fixtures/invalid/{name}.yaml"));
        let tree = node::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert!(
            !validator.is_valid(&tree.to_json()),
            "{name} must not conform"
        );
    }
}
