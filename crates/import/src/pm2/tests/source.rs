//! Reading the file's apps: lines found in a JavaScript file (a large one in
//! one pass), a supervise file refused, entries that are not apps left out.

use super::*;

#[test]
fn lines_of_a_javascript_file_are_found_by_searching_it() {
    let text = "module.exports = {\n  apps: [{\n    name: 'api',\n    script: 'api.js',\n  }, {\n    name: \"web\",\n    script: 'web.js',\n  }],\n};\n";
    let value =
        json!({"apps": [{"name": "api", "script": "api.js"}, {"name": "web", "script": "web.js"}]});
    let apps = apps_from_evaluated(&value, text).expect("apps").apps;
    assert_eq!(apps[0].line, Some(3));
    assert_eq!(apps[0].line_of("script"), Some(4));
    assert_eq!(apps[1].line, Some(6));
    assert_eq!(apps[1].line_of("script"), Some(7));
}

#[test]
fn a_supervise_file_is_not_taken_for_a_pm2_one() {
    let error =
        apps_from_evaluated(&json!({"apps": {"web": {"command": "x"}}}), "").expect_err("refused");
    assert!(error.contains("supervise file"), "{error}");
}

#[test]
fn an_app_without_a_script_and_entries_that_are_not_apps_are_left_out_with_a_warning() {
    let value = json!({"apps": [{"name": "a"}, "server.js", null, {"name": "b", "script": "b.js"}], "deploy": {"production": {}}});
    let pm2 = apps_from_evaluated(&value, "").expect("read");
    let (apps, notes) = translate(
        &pm2,
        None,
        &places(),
        &machine(&[("/srv/app/b.js", FileKind::Text)]),
    );
    assert_eq!(apps.len(), 1);
    assert_eq!(apps[0].name, "b");
    let texts: Vec<&str> = notes.iter().map(|n| n.text.as_str()).collect();
    assert!(texts.iter().any(|t| t.contains("no `script`")), "{texts:?}");
    assert_eq!(
        texts.iter().filter(|t| t.contains("not an app")).count(),
        2,
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t.contains("`deploy`")), "{texts:?}");
    assert!(
        apps_from_evaluated(&json!({}), "").is_err(),
        "an empty export has no apps"
    );
}

#[test]
fn a_large_javascript_file_is_read_in_one_pass() {
    let mut text = String::from("module.exports = { apps: [\n");
    let mut apps = Vec::new();
    for i in 0..4000 {
        text.push_str(&format!(
            "  {{\n    name: 'app{i}',\n    script: 'a.js',\n    instances: 2,\n  }},\n"
        ));
        apps.push(json!({"name": format!("app{i}"), "script": "a.js", "instances": 2}));
    }
    text.push_str("] };\n");
    let started = std::time::Instant::now();
    let pm2 = apps_from_evaluated(&json!({"apps": apps}), &text).expect("read");
    assert_eq!(pm2.apps[3999].line, Some(3 + 5 * 3999));
    assert_eq!(pm2.apps[3999].line_of("instances"), Some(5 + 5 * 3999));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
