//! [`Template`]: the text of `argv`, `env`, probe targets and `exec` checks,
//! whose `{instance}` / `{instance+N}` placeholders are parsed when the file
//! is checked and expanded for each slot (or written out as [`Piece`]s by
//! exporters).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A string with `{instance}` / `{instance+N}` placeholders.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Template {
    parts: Vec<TemplatePart>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
enum TemplatePart {
    Text(String),
    /// `{instance}` (offset 0) or `{instance+N}`.
    Instance(u32),
}

/// One piece of a [`Template`]: literal text, or the slot number plus an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    /// `{instance}` (0) or `{instance+N}` (N).
    Instance(u32),
}

/// Why a template could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError(pub String);

impl Template {
    /// Parse placeholders. Braces that do not start `{instance` are literal text
    /// (so `${HOME}` in a shell command stays as it is).
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        const OPEN: &str = "{instance";
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find(OPEN) {
            let after = &rest[start + OPEN.len()..];
            let Some(end) = after.find('}') else {
                return Err(TemplateError(format!(
                    "unclosed placeholder `{}`",
                    &rest[start..]
                )));
            };
            let inner = &after[..end];
            let offset = if inner.is_empty() {
                0
            } else if let Some(number) = inner.strip_prefix('+') {
                number
                    .parse::<u32>()
                    .ok()
                    .filter(|_| number.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| {
                        TemplateError(format!(
                            "bad placeholder `{{instance{inner}}}`: expected `{{instance+N}}` with N a whole number"
                        ))
                    })?
            } else {
                return Err(TemplateError(format!(
                    "bad placeholder `{{instance{inner}}}`: use `{{instance}}` or `{{instance+N}}`"
                )));
            };
            if start > 0 {
                parts.push(TemplatePart::Text(rest[..start].to_string()));
            }
            parts.push(TemplatePart::Instance(offset));
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            parts.push(TemplatePart::Text(rest.to_string()));
        }
        Ok(Template { parts })
    }

    /// A template without placeholders.
    pub fn literal(text: impl Into<String>) -> Template {
        Template {
            parts: vec![TemplatePart::Text(text.into())],
        }
    }

    /// Whether the text depends on the instance number.
    pub fn uses_instance(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, TemplatePart::Instance(_)))
    }

    /// The template piece by piece, for writers that express placeholders
    /// in another language (`%i` for systemd, `$((N+%i))` for a shell).
    pub fn pieces(&self) -> impl Iterator<Item = Piece<'_>> {
        self.parts.iter().map(|part| match part {
            TemplatePart::Text(text) => Piece::Text(text),
            TemplatePart::Instance(offset) => Piece::Instance(*offset),
        })
    }

    /// The text for one slot.
    pub fn expand(&self, instance: u32) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                TemplatePart::Text(text) => out.push_str(text),
                TemplatePart::Instance(offset) => {
                    out.push_str(&(u64::from(instance) + u64::from(*offset)).to_string())
                }
            }
        }
        out
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in &self.parts {
            match part {
                TemplatePart::Text(text) => f.write_str(text)?,
                TemplatePart::Instance(0) => f.write_str("{instance}")?,
                TemplatePart::Instance(n) => write!(f, "{{instance+{n}}}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_expands_instance_and_offsets() {
        let t = Template::parse("w{instance}-{instance+9000}").unwrap();
        assert_eq!(t.expand(0), "w0-9000");
        assert_eq!(t.expand(3), "w3-9003");
        assert!(t.uses_instance());
        assert_eq!(t.to_string(), "w{instance}-{instance+9000}");
    }

    #[test]
    fn template_leaves_other_braces_alone() {
        let t = Template::parse("echo ${HOME} {x}").unwrap();
        assert_eq!(t.expand(1), "echo ${HOME} {x}");
        assert!(!t.uses_instance());
    }

    #[test]
    fn template_rejects_bad_placeholders() {
        assert!(Template::parse("{instance-1}").is_err());
        assert!(Template::parse("{instance+x}").is_err());
        assert!(Template::parse("{instance+}").is_err());
        assert!(Template::parse("{instance").is_err());
        assert!(Template::parse("{instances}").is_err());
    }
}
