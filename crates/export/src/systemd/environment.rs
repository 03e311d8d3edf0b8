//! The environment of an instance: `env`, what supervise sets itself
//! (`SUPERVISE_APP`, `SUPERVISE_INSTANCE`, `PORT` …) as `Environment=`,
//! and `env_file` as `EnvironmentFile=` where systemd reads it as we do,
//! else copied into `Environment=` lines.

use super::syntax::{escape_line, escape_specifiers, marked, quote};
use super::{AppUnits, INSTANCE_MARK};
use crate::{Notes, name_list, reserved_env_name};
use model::spec::{ListenAddress, Piece};

impl AppUnits<'_> {
    /// `Environment=` for `env` and what supervise sets, after the
    /// `EnvironmentFile=` of `env_file` when systemd can read it.
    pub(super) fn environment(&self, service: &mut Vec<String>, notes: &mut Notes) {
        let name = self.name();
        let process = &self.app.process;
        let mut inline: Vec<(String, String)> = Vec::new();
        let env_file = self.env_file(notes);
        let from_file: Vec<String> = env_file
            .as_ref()
            .map(|(_, names)| names.clone())
            .unwrap_or_default();
        for (key, value) in &process.env {
            if value
                .pieces()
                .any(|p| matches!(p, Piece::Instance(n) if n > 0))
            {
                continue; // set by the shell in ExecStart=
            }
            if from_file.contains(key) && env_file.as_ref().is_some_and(|(f, _)| f.is_some()) {
                continue; // read from EnvironmentFile=
            }
            if reserved_env_name(self.app, key) {
                continue; // an env_file's, which supervise overrides (warned)
            }
            inline.push((key.clone(), marked(value)));
        }
        inline.push(("SUPERVISE_APP".into(), name.to_string()));
        inline.push(("SUPERVISE_INSTANCE".into(), INSTANCE_MARK.to_string()));
        inline.push(("NODE_APP_INSTANCE".into(), INSTANCE_MARK.to_string()));
        if let Some(port) = process.listen.iter().find_map(|l| match &l.address {
            ListenAddress::Tcp(a) if a.port() != 0 => Some(a.port()),
            _ => None,
        }) {
            inline.push(("PORT".into(), port.to_string()));
        }
        if let Some((Some(file), _)) = &env_file {
            service.push(format!("EnvironmentFile={}", escape_line(file)));
        }
        for (key, value) in inline {
            service.push(format!(
                "Environment={}",
                quote(&escape_specifiers(&format!("{key}={value}")))
            ));
        }
    }

    /// `env_file` as `EnvironmentFile=` (its path) when systemd reads it
    /// the way we do, and the names it sets. `None` path: its entries are
    /// written as `Environment=` (with a warning saying why).
    fn env_file(&self, notes: &mut Notes) -> Option<(Option<String>, Vec<String>)> {
        let name = self.name();
        let path = self.source.written(name, &["env_file"])?;
        let file = self.source.node_at(&path)?.as_str()?.to_string();
        let absolute = self.source.folder.join(&file);
        let text = std::fs::read_to_string(&absolute).unwrap_or_default();
        let entries = config::envfile::parse(&text).unwrap_or_default();
        let names: Vec<String> = entries.iter().map(|(k, _)| k.clone()).collect();
        let env_names = self.source.env_names(&self.app.name);
        let overridden: Vec<&String> = names.iter().filter(|n| env_names.contains(n)).collect();
        let reserved: Vec<&String> = names
            .iter()
            .filter(|n| reserved_env_name(self.app, n))
            .collect();
        let unlike =
            text.contains('\\') || text.lines().any(|l| l.trim_start().starts_with("export "));
        // systemd's EnvironmentFile= wins over Environment=: a file that sets
        // what `env` or supervise sets is copied instead, without those.
        let mut why = Vec::new();
        if !overridden.is_empty() {
            why.push(format!(
                "`env` sets {} too, and systemd's EnvironmentFile= would win over Environment=",
                name_list(&overridden)
            ));
        }
        if !reserved.is_empty() {
            why.push(format!(
                "it sets {}, which supervise sets itself (and systemd's EnvironmentFile= would win): left out",
                name_list(&reserved)
            ));
        }
        if unlike {
            why.push("it uses `export` or backslash escapes, which systemd reads otherwise".into());
        }
        if !why.is_empty() {
            self.warn(
                notes,
                &["env_file"],
                format!(
                    "env_file is copied into Environment= lines: {}; export again after editing it",
                    why.join("; ")
                ),
            );
            return Some((None, names));
        }
        Some((Some(absolute.display().to_string()), names))
    }
}
