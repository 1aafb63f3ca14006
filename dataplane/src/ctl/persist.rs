//! Writing the running config back to the operator's file after a live edit.
//!
//! The file is edited as a document with `toml_edit`, not regenerated: only the keys and
//! tables whose value differs between the old and the new running config change, so the
//! operator's comments, key order, blank lines and table layout survive (docs/ctl.md,
//! "Persistence"). Backends, services, ports and other arrays of tables are matched by
//! their `name` (endpoints by `name`, else `address`), so removing one backend or
//! endpoint keeps the comments of every other.
//!
//! The result is re-parsed before it is written: it must give exactly the config the daemon
//! runs. When it does not (the file was edited by hand since the daemon read it, or holds
//! something the merge cannot express), the whole config is written in canonical form
//! instead, as before, and [`Written::layout_kept`] says so.
//!
//! The first line is a header naming the config generation (`# Written by spillway (config
//! generation N) ...`); at start the daemon continues from it ([`header_generation`]).
//! Writes are atomic ([`write_atomic`]).

use spillway_shared::config::Config;
use std::io::Write;
use std::path::Path;
use toml_edit::{ArrayOfTables, DocumentMut, InlineTable, Item, Table, TableLike, Value};

/// How every header written by the daemon starts; the generation and `)` follow.
pub const HEADER_PREFIX: &str = "# Written by spillway (config generation ";

/// The config generation recorded in `text`'s first line, if it is a header this daemon
/// wrote (`# Written by spillway (config generation N) ...`).
pub fn header_generation(text: &str) -> Option<u64> {
    let rest = text.lines().next()?.strip_prefix(HEADER_PREFIX)?;
    rest.split(')').next()?.trim().parse().ok()
}

/// What [`write_back`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The file's text.
    pub text: String,
    /// True when the operator's layout and comments were kept; false when the config was
    /// written in canonical form (see the module docs).
    pub layout_kept: bool,
}

/// The new text of a config file whose current text is `current` (`None`: no file), after
/// a live edit changed the running config from `old` to `new`; `generation` is the new
/// config generation. Parsing the result always gives exactly `new`.
pub fn render(current: Option<&str>, old: &Config, new: &Config, generation: u64) -> Written {
    if let Some(text) = current.and_then(|c| merged(c, old, new, generation)) {
        return Written { text, layout_kept: true };
    }
    let text = format!("{HEADER_PREFIX}{generation}) after a live edit; the file's comments could not be kept.\n{}", new.to_toml());
    Written { text, layout_kept: false }
}

/// Reads `path`, [`render`]s the edit into it and writes it back atomically.
pub fn write_back(path: &Path, old: &Config, new: &Config, generation: u64) -> std::io::Result<Written> {
    let current = match std::fs::read_to_string(path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if let Some(text) = &current {
        // An edit by hand since the daemon loaded the file would be overwritten silently:
        // refuse instead, unless the file already holds what we are about to write (e.g.
        // `spillwayctl config apply` of the edited file itself).
        match Config::from_toml(text) {
            Ok(on_disk) if &on_disk == old || &on_disk == new => {}
            Ok(_) => {
                return Err(std::io::Error::other(format!(
                    "{} was changed by hand since the daemon loaded it (it no longer matches the running config); \
                     apply it with `spillwayctl config apply {}` or restart, then retry the edit",
                    path.display(),
                    path.display()
                )))
            }
            Err(e) => {
                return Err(std::io::Error::other(format!(
                    "{} does not parse any more (edited by hand?): {e}; fix it, or apply a good file with `spillwayctl config apply`, then retry the edit",
                    path.display()
                )))
            }
        }
    }
    let w = render(current.as_deref(), old, new, generation);
    write_atomic(path, &w.text)?;
    Ok(w)
}

/// `current` with the difference between `old` and `new` applied, if it re-parses to `new`.
fn merged(current: &str, old: &Config, new: &Config, generation: u64) -> Option<String> {
    let mut doc: DocumentMut = current.parse().ok()?;
    let old_t = toml::Table::try_from(old).ok()?;
    let new_t = toml::Table::try_from(new).ok()?;
    merge_table(doc.as_table_mut(), &old_t, &new_t, false);
    let body = doc.to_string();
    let body = match body.strip_prefix(HEADER_PREFIX) {
        Some(rest) => rest.split_once('\n').map_or("", |(_, tail)| tail).to_string(),
        None => body,
    };
    let text = format!("{HEADER_PREFIX}{generation}) after a live edit; comments and layout are kept.\n{body}");
    match Config::from_toml(&text) {
        Ok(back) if &back == new => Some(text),
        Ok(_) => {
            tracing::warn!("config write-back: the merged file does not parse to the running config (edited by hand since?); writing it in canonical form");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "config write-back: the merged file does not parse; writing it in canonical form");
            None
        }
    }
}

/// Applies the change `old` -> `new` to `doc`: keys equal in both are left as the file has
/// them (also when the file leaves them to their defaults), removed keys are removed,
/// changed ones are edited in place (keeping the key's comments), new ones appended.
/// `inline`: `doc` is an inline table (only values may go in).
fn merge_table(doc: &mut dyn TableLike, old: &toml::Table, new: &toml::Table, inline: bool) {
    let keys: Vec<&String> = old.keys().chain(new.keys().filter(|k| !old.contains_key(*k))).collect();
    for k in keys {
        let (o, n) = (old.get(k), new.get(k));
        if o == n {
            continue;
        }
        match n {
            None => {
                doc.remove(k);
            }
            Some(n) => match doc.get_mut(k) {
                Some(item) => merge_item(item, o, n),
                None => {
                    doc.insert(k, new_item(n, inline));
                }
            },
        }
    }
}

fn merge_item(item: &mut Item, old: Option<&toml::Value>, new: &toml::Value) {
    let empty = toml::Table::new();
    let old_table = old.and_then(toml::Value::as_table).unwrap_or(&empty);
    match (item, new) {
        (Item::Table(t), toml::Value::Table(n)) => merge_table(t, old_table, n, false),
        (Item::Value(Value::InlineTable(t)), toml::Value::Table(n)) => merge_table(t, old_table, n, true),
        (Item::ArrayOfTables(a), toml::Value::Array(n)) if !n.is_empty() && n.iter().all(toml::Value::is_table) => {
            merge_array_of_tables(a, old.and_then(toml::Value::as_array).map_or(&[], Vec::as_slice), n)
        }
        (Item::Value(v), n) => {
            let decor = v.decor().clone();
            *v = new_value(n);
            *v.decor_mut() = decor;
        }
        (item, n) => *item = new_item(n, false),
    }
}

/// The identity of an element of an array of tables: its `name`, or else its `address`
/// (endpoints of a backend group may leave the name to default to the address).
fn name_of(t: &toml::Value) -> Option<&str> {
    t.get("name").or_else(|| t.get("address")).and_then(toml::Value::as_str)
}

/// Matches the elements of an array of tables by `name` (services, backends, ports,
/// endpoints; an endpoint without a name by its `address`):
/// a kept element keeps its table (comments, position) and is merged; a new one is
/// appended after the last kept one; a removed one goes with its comments. Arrays whose
/// elements have no unique names are replaced whole.
fn merge_array_of_tables(doc: &mut ArrayOfTables, old: &[toml::Value], new: &[toml::Value]) {
    let doc_names: Vec<Option<String>> =
        doc.iter().map(|t| t.get("name").or_else(|| t.get("address")).and_then(Item::as_str).map(str::to_string)).collect();
    fn unique<'a>(names: impl Iterator<Item = Option<&'a str>>) -> bool {
        let mut seen = std::collections::HashSet::new();
        names.into_iter().all(|n| n.is_some_and(|n| seen.insert(n)))
    }
    let named = unique(doc_names.iter().map(Option::as_deref))
        && unique(old.iter().map(name_of))
        && unique(new.iter().map(name_of));
    if !named {
        *doc = new_array_of_tables(new);
        return;
    }
    let mut tables: Vec<Option<Table>> = doc.iter().cloned().map(Some).collect();
    // A kept element the file writes, and its running value: a new element leaves out the
    // keys this one leaves to their defaults when it has the same value.
    let model: Option<(Table, toml::Table)> = doc.iter().zip(&doc_names).find_map(|(t, n)| {
        let o = old.iter().find(|o| name_of(o) == n.as_deref())?.as_table()?;
        Some((t.clone(), o.clone()))
    });
    doc.clear();
    for n in new {
        let name = name_of(n);
        let o = old.iter().find(|o| name_of(o) == name).and_then(toml::Value::as_table);
        let kept = doc_names.iter().position(|d| d.as_deref() == name).and_then(|i| tables[i].take());
        match (kept, n.as_table()) {
            (Some(mut t), Some(nt)) => {
                merge_table(&mut t, o.unwrap_or(&toml::Table::new()), nt, false);
                doc.push(t);
            }
            (_, Some(nt)) => {
                let defaulted = |k: &str, v: &toml::Value| model.as_ref().is_some_and(|(t, o)| !t.contains_key(k) && o.get(k) == Some(v));
                let mut t = Table::new();
                for (k, v) in nt.iter().filter(|(k, _)| k.as_str() == "name").chain(nt.iter().filter(|(k, v)| k.as_str() != "name" && !defaulted(k, v))) {
                    t.insert(k, new_item(v, false));
                }
                doc.push(t);
            }
            (_, None) => {}
        }
    }
}

fn new_array_of_tables(v: &[toml::Value]) -> ArrayOfTables {
    let mut a = ArrayOfTables::new();
    for t in v.iter().filter_map(toml::Value::as_table) {
        a.push(new_table(t));
    }
    a
}

/// A standard table for a new element: arrays of tables as `[[...]]`, other tables inline.
fn new_table(t: &toml::Table) -> Table {
    let mut out = Table::new();
    for (k, v) in t {
        out.insert(k, new_item(v, false));
    }
    out
}

fn new_item(v: &toml::Value, inline: bool) -> Item {
    match v {
        toml::Value::Array(a) if !inline && !a.is_empty() && a.iter().all(toml::Value::is_table) => Item::ArrayOfTables(new_array_of_tables(a)),
        v => Item::Value(new_value(v)),
    }
}

fn new_value(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::from(s.as_str()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => Value::from(*f),
        toml::Value::Boolean(b) => Value::from(*b),
        toml::Value::Datetime(d) => d.to_string().parse().unwrap_or_else(|_| Value::from(d.to_string())),
        toml::Value::Array(a) => Value::Array(a.iter().map(new_value).collect()),
        toml::Value::Table(t) => {
            let mut it = InlineTable::new();
            for (k, v) in t {
                it.insert(k, new_value(v));
            }
            Value::InlineTable(it)
        }
    }
}

/// Writes `text` to `path` atomically: a temporary file in the same directory, written and
/// fsynced, renamed over `path`, then the directory fsynced. Keeps the old file's mode.
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "config".into());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let res = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        if let Ok(m) = std::fs::metadata(path) {
            let _ = f.set_permissions(m.permissions());
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(&dir)?.sync_all()
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

#[cfg(test)]
#[path = "persist_tests.rs"]
mod tests;
