//! The one error type of configuration loading, and the translation of TOML
//! parser and serde errors into it.
//!
//! Every error says where (file, line, column and the field's dotted path),
//! what is wrong, and — in `hint` — what to do about it.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::suggest;

/// A configuration mistake, located in the file and explained.
///
/// Displays as `file:line:column: field: problem; hint`, leaving out the parts
/// that are unknown (an I/O error has no line, a syntax error may have no
/// field).
#[derive(Debug, thiserror::Error)]
#[error("{}", self.render())]
pub struct ConfigError {
    /// The configuration file as it was named to [`super::load`] or [`super::parse`].
    pub file: PathBuf,
    /// 1-based line of the offending value, key or table header.
    pub line: Option<usize>,
    /// 1-based column (in characters) within `line`.
    pub column: Option<usize>,
    /// Dotted path of the field, e.g. `path[1].interface` (array indices
    /// start at 0); empty when no single field is at fault.
    pub field: String,
    /// What is wrong.
    pub problem: String,
    /// What to do about it.
    pub hint: Option<String>,
}

impl ConfigError {
    /// An error about `file` with no position yet.
    pub(crate) fn new(file: &Path, field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            file: file.to_path_buf(),
            line: None,
            column: None,
            field: field.into(),
            problem: problem.into(),
            hint: None,
        }
    }

    /// Adds advice on how to fix the mistake.
    pub(crate) fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    fn render(&self) -> String {
        let mut out = self.file.display().to_string();
        if let Some(line) = self.line {
            out.push_str(&format!(":{line}"));
            if let Some(column) = self.column {
                out.push_str(&format!(":{column}"));
            }
        }
        out.push_str(": ");
        if !self.field.is_empty() {
            out.push_str(&self.field);
            out.push_str(": ");
        }
        out.push_str(&self.problem);
        if let Some(hint) = &self.hint {
            out.push_str("; ");
            out.push_str(hint);
        }
        out
    }
}

/// The text being parsed and its name, for turning byte spans into positions.
#[derive(Clone, Copy)]
pub(super) struct Source<'a> {
    pub file: &'a Path,
    pub text: &'a str,
}

impl Source<'_> {
    /// 1-based line and character column of byte `offset` (clamped to the text).
    pub fn position(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        (line, column)
    }

    /// An error located at the start of `span`.
    pub fn error(
        &self,
        span: Range<usize>,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = self.position(span.start);
        let mut err = ConfigError::new(self.file, field, problem);
        err.line = Some(line);
        err.column = Some(column);
        err
    }

    /// An error with no position in the file (e.g. a table that is missing).
    pub fn error_unplaced(
        &self,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> ConfigError {
        ConfigError::new(self.file, field, problem)
    }
}

/// Which kind of file is being read; decides which fields exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Client,
    Server,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Client => "client",
            Mode::Server => "server",
        }
    }
}

/// Translates an error of the TOML parser itself (the document is not valid
/// TOML), before any field is known.
pub(super) fn syntax_error(src: &Source<'_>, err: &toml::de::Error) -> ConfigError {
    let message = one_line(err.message());
    let span = err.span().unwrap_or(0..0);
    if message == "duplicate key" {
        let key = src.text.get(span.clone()).unwrap_or("").trim().to_string();
        return src
            .error(
                span,
                key.clone(),
                format!("`{key}` is defined twice in the same table"),
            )
            .with_hint("keep one definition and merge or delete the other");
    }
    src.error(span, "", format!("TOML syntax error: {message}"))
        .with_hint("fix the TOML syntax at this position (strings need double quotes, tables are written [name], one entry of an array of tables [[name]])")
}

/// Translates a serde error from deserialising the (syntactically valid)
/// document into the raw structs; `tree` is the same document, used to name
/// the field at the error's position.
pub(super) fn serde_error(
    src: &Source<'_>,
    tree: &Spanned<DeTable<'_>>,
    err: &toml::de::Error,
    mode: Mode,
) -> ConfigError {
    let message = one_line(err.message());
    let span = err.span().unwrap_or(0..0);
    let field = field_at(tree.get_ref(), &span).unwrap_or_default();

    if let Some(rest) = message.strip_prefix("unknown field ") {
        // "unknown field `x`, expected `a` or `b`" / "expected one of `a`, `b`".
        let names: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
        let unknown = names.first().copied().unwrap_or("");
        let known = names.get(1..).unwrap_or(&[]);
        let problem = format!("unknown field `{unknown}`");
        let hint = unknown_field_hint(&field, unknown, known, mode);
        return src.error(span, field, problem).with_hint(hint);
    }

    let problem = readable_serde_message(&message);
    let mut err = src.error(span, field.clone(), problem);
    if message.contains("expected a sequence") {
        let leaf = field.rsplit('.').next().unwrap_or(&field);
        let leaf = leaf.split('[').next().unwrap_or(leaf);
        if message.contains("map") {
            err = err.with_hint(format!(
                "`{leaf}` is an array: write one [[{leaf}]] table (double brackets) per entry, or `{leaf} = [ ... ]`"
            ));
        } else {
            err = err.with_hint(format!(
                "write `{leaf} = [ ... ]` (a list in square brackets)"
            ));
        }
    } else if message.contains("expected a string") {
        err = err.with_hint("put the value in double quotes");
    } else if message.contains("expected i64") {
        err =
            err.with_hint("write a whole number without quotes or units, e.g. `max_hold_ms = 100`");
    } else if message.contains("expected a boolean") {
        err = err.with_hint("write `true` or `false` without quotes");
    } else if message.contains("expected struct") {
        err = err.with_hint("this is a table: write it as a [name] section with its fields below");
    }
    err
}

/// Keys of the top level of a client configuration.
const TOP_LEVEL_CLIENT: &[&str] = &[
    "mode",
    "private_key_file",
    "tun",
    "server",
    "path",
    "scheduler",
    "reorder",
    "congestion",
    "timers",
    "log",
    "metrics",
    "control",
    "state_directory",
];
/// Keys of the top level of a server configuration.
const TOP_LEVEL_SERVER: &[&str] = &[
    "mode",
    "private_key_file",
    "listen",
    "tun",
    "peer",
    "scheduler",
    "reorder",
    "congestion",
    "timers",
    "log",
    "metrics",
    "control",
    "handshake",
    "limits",
];

/// Advice for a key that does not exist here; `field` is its dotted path.
fn unknown_field_hint(field: &str, unknown: &str, known: &[&str], mode: Mode) -> String {
    // Keys that exist, but in the other mode's file.
    let other_mode = match (mode, unknown) {
        (Mode::Client, "listen" | "peer" | "handshake" | "limits") => Some(Mode::Server),
        (Mode::Server, "server" | "path" | "state_directory") => Some(Mode::Client),
        _ => None,
    };
    let top_level = match mode {
        Mode::Client => TOP_LEVEL_CLIENT,
        Mode::Server => TOP_LEVEL_SERVER,
    };
    if field.contains('.') && top_level.contains(&unknown) {
        return format!(
            "`{unknown}` is a top-level setting, but here it falls inside the table above it; \
             move it above the first [table] of the file"
        );
    }
    if let Some(other) = other_mode {
        return format!(
            "`{unknown}` belongs in a {} configuration, but this file has mode = \"{}\"",
            other.name(),
            mode.name()
        );
    }
    // Durations and sizes carry their unit in the name.
    let with_unit = known.iter().find(|k| {
        k.strip_prefix(unknown)
            .is_some_and(|rest| rest.starts_with('_'))
    });
    if let Some(candidate) = with_unit {
        return format!("did you mean `{candidate}`? (values carry their unit in the name)");
    }
    if let Some(candidate) = suggest::closest(unknown, known.iter().copied()) {
        return format!("did you mean `{candidate}`?");
    }
    if known.is_empty() {
        "remove it; this table takes no fields".to_string()
    } else {
        let list: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
        format!("remove it; the fields here are {}", list.join(", "))
    }
}

/// Rewrites serde's type names into the words of TOML.
fn readable_serde_message(message: &str) -> String {
    message
        .replace("expected i64", "expected an integer")
        .replace("expected a sequence", "expected an array")
        .replace("invalid type: map", "invalid type: table")
        .replace("invalid type: sequence", "invalid type: array")
        .replace("floating point", "float")
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The dotted path of the key or value that `span` points at, if any.
///
/// Exact matches of a key or value span win (deepest first); otherwise the
/// deepest value whose span contains the start of `span`.
pub(super) fn field_at(root: &DeTable<'_>, span: &Range<usize>) -> Option<String> {
    find_exact(root, "", span).or_else(|| find_containing(root, "", span.start))
}

fn join(prefix: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let key = if plain {
        key.to_string()
    } else {
        format!("{key:?}")
    };
    if prefix.is_empty() {
        key
    } else {
        format!("{prefix}.{key}")
    }
}

fn find_exact(table: &DeTable<'_>, prefix: &str, span: &Range<usize>) -> Option<String> {
    for (key, value) in table.iter() {
        let path = join(prefix, key.get_ref());
        if let Some(found) = find_exact_value(value, &path, span) {
            return Some(found);
        }
        if key.span() == *span {
            return Some(path);
        }
    }
    None
}

fn find_exact_value(
    value: &Spanned<DeValue<'_>>,
    path: &str,
    span: &Range<usize>,
) -> Option<String> {
    let nested = match value.get_ref() {
        DeValue::Table(table) => find_exact(table, path, span),
        DeValue::Array(array) => array
            .iter()
            .enumerate()
            .find_map(|(i, item)| find_exact_value(item, &format!("{path}[{i}]"), span)),
        _ => None,
    };
    nested.or_else(|| (value.span() == *span).then(|| path.to_string()))
}

fn find_containing(table: &DeTable<'_>, prefix: &str, offset: usize) -> Option<String> {
    table.iter().find_map(|(key, value)| {
        let path = join(prefix, key.get_ref());
        find_containing_value(value, &path, offset)
    })
}

fn find_containing_value(
    value: &Spanned<DeValue<'_>>,
    path: &str,
    offset: usize,
) -> Option<String> {
    let nested = match value.get_ref() {
        DeValue::Table(table) => find_containing(table, path, offset),
        DeValue::Array(array) => array
            .iter()
            .enumerate()
            .find_map(|(i, item)| find_containing_value(item, &format!("{path}[{i}]"), offset)),
        _ => None,
    };
    nested.or_else(|| value.span().contains(&offset).then(|| path.to_string()))
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
