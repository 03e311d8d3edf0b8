//! `ExecStart=`: the command as systemd reads a command line, its program
//! as a path systemd accepts, and `/bin/sh` in front when a word or an
//! `env` value needs `{instance+N}`, which systemd cannot add up.

use std::fmt::Write as _;

use super::AppUnits;
use super::syntax::{exec_word, marked, shell_word};
use model::spec::{Piece, Template};

impl AppUnits<'_> {
    /// Whether any word of the command or any `env` value needs arithmetic
    /// on the instance number.
    fn needs_shell(&self) -> bool {
        let offset = |t: &Template| t.pieces().any(|p| matches!(p, Piece::Instance(n) if n > 0));
        self.app.process.argv.iter().any(offset)
            || self.app.process.env.iter().any(|(_, v)| offset(v))
    }

    /// The program as systemd must be given it: the absolute path `check`
    /// found, else a relative path made absolute from `cwd` (systemd
    /// takes only absolute paths and bare names, which it looks up in a
    /// PATH of its own), with `{instance}` marked. A name starting with
    /// `@-:+!` is made absolute too: systemd reads those as prefixes even
    /// in quotes.
    fn program(&self) -> Option<String> {
        let process = &self.app.process;
        if let Some(program) = &process.program {
            return Some(program.display().to_string());
        }
        let first = process.argv.first()?;
        if first
            .pieces()
            .any(|p| matches!(p, Piece::Instance(n) if n > 0))
        {
            return None; // run by `/bin/sh`, which finds it from WorkingDirectory=
        }
        let written = marked(first);
        ((written.contains('/') && !written.starts_with('/'))
            || written.starts_with(['@', '-', ':', '+', '!']))
        .then(|| {
            process
                .cwd
                .join(&written)
                .components()
                .collect::<std::path::PathBuf>()
        })
        .map(|path| path.display().to_string())
    }

    /// The command line of `ExecStart=`.
    pub(super) fn exec_start(&self) -> String {
        let process = &self.app.process;
        let program = self.program();
        if self.needs_shell() {
            // `/bin/sh -c 'export PORT_ADMIN=$((9100+%i)); exec prog …'`.
            let mut script = String::new();
            for (name, value) in &process.env {
                if value
                    .pieces()
                    .any(|p| matches!(p, Piece::Instance(n) if n > 0))
                {
                    let _ = write!(script, "export {name}={}; ", shell_word(value));
                }
            }
            script.push_str("exec");
            for (index, word) in process.argv.iter().enumerate() {
                script.push(' ');
                if index == 0
                    && let Some(program) = &program
                {
                    script.push_str(&shell_word(&Template::literal(program.clone())));
                    continue;
                }
                script.push_str(&shell_word(word));
            }
            return format!("/bin/sh -c {}", exec_word(&script));
        }
        let mut words = Vec::new();
        for (index, word) in process.argv.iter().enumerate() {
            if index == 0 {
                // systemd wants an absolute path (or looks in its own PATH).
                if let Some(program) = &program {
                    words.push(exec_word(program));
                    continue;
                }
            }
            words.push(exec_word(&marked(word)));
        }
        words.join(" ")
    }
}
