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
//! Writes are atomic and keep the file's owner, group and mode; the path is resolved at
//! every write, and the last good text is kept beside the file as `FILE.bak`
//! ([`super::persist_file`]).

pub use super::persist_file::{backup_path, keep_last_good, resolve, write_atomic, Durable};
use spillway_shared::config::Config;
use std::path::{Path, PathBuf};
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
    /// The file written: the config path with its symlinks resolved at this write.
    pub path: PathBuf,
    /// Set when the file was replaced (it holds the edit) but its directory could not be
    /// fsynced afterwards: the error's text. The edit is then applied, but may not survive
    /// a power failure.
    pub not_durable: Option<String>,
}

/// The new text of a config file whose current text is `current` (`None`: no file), after
/// a live edit changed the running config from `old` to `new`; `generation` is the new
/// config generation. Parsing the result always gives exactly `new`.
pub fn render(current: Option<&str>, old: &Config, new: &Config, generation: u64) -> (String, bool) {
    if let Some(text) = current.and_then(|c| merged(c, old, new, generation)) {
        return (text, true);
    }
    (canonical(new, generation), false)
}

fn canonical(new: &Config, generation: u64) -> String {
    format!("{HEADER_PREFIX}{generation}) after a live edit; the file's comments could not be kept.\n{}", new.to_toml())
}

/// `text` (a complete config file given to `config apply`, which parses to `new`) with
/// our header in front instead of any it had; canonical form if it does not parse to `new`.
fn replacement_text(text: &str, new: &Config, generation: u64) -> (String, bool) {
    let body = match text.strip_prefix(HEADER_PREFIX) {
        Some(rest) => rest.split_once('\n').map_or("", |(_, tail)| tail),
        None => text,
    };
    let out = format!("{HEADER_PREFIX}{generation}) by config apply; the applied file's comments are kept.\n{body}");
    match Config::from_toml(&out) {
        Ok(back) if &back == new => (out, true),
        _ => (canonical(new, generation), false),
    }
}

/// Reads the config file at `path`, [`render`]s the edit `old` -> `new` into it and writes
/// it back atomically ([`write_atomic`]), then refreshes `FILE.bak` ([`keep_last_good`]).
/// `path` is resolved at this write ([`resolve`]): a symlink re-pointed since start is
/// followed to its new target. `replacement`: the complete text of a `config apply`.
///
/// Refused (`Err`, the file untouched), naming the file and the way out:
/// * the file was changed by hand (it parses, but neither to `old` nor to `new`): the
///   hand edit would be lost; `spillwayctl config apply FILE` applies it;
/// * the file does not load (it does not parse or fails validation), or is missing
///   (deleted or moved; a dangling symlink): a
///   live edit would write it without the operator's comments. Recovery: fix or restore it
///   by hand (`FILE.bak` is the last good text), or `config apply GOOD.toml`, whose
///   `replacement` text, comments included, is then written as the new file;
/// * reading or writing fails before the rename (nothing changed).
///
/// A failure to fsync the directory after the rename is not an error: the file holds the
/// edit, and [`Written::not_durable`] says so.
pub fn write_back(path: &Path, old: &Config, new: &Config, generation: u64, replacement: Option<&str>) -> std::io::Result<Written> {
    let (real, text, layout_kept) = planned_text(path, old, new, generation, replacement)?;
    let durable = write_atomic(&real, &text)?;
    keep_last_good(&real, &text);
    let not_durable = match durable {
        Durable::Yes => None,
        Durable::DirectoryNotSynced(e) => Some(e.to_string()),
    };
    Ok(Written { text, layout_kept, path: real, not_durable })
}

/// What [`write_back`] would write, and where (the resolved path, the text, whether the
/// file's layout is kept), or its refusal, without writing anything: a dry run refuses
/// an edit exactly when the edit would be refused (QA: a dry run of an edit that the file
/// changed by hand or missing would refuse answered with a plan, exit 0).
pub fn planned_text(path: &Path, old: &Config, new: &Config, generation: u64, replacement: Option<&str>) -> std::io::Result<(std::path::PathBuf, String, bool)> {
    let real = resolve(path)?;
    let shown = if real == path { path.display().to_string() } else { format!("{} (-> {})", path.display(), real.display()) };
    let bak = backup_path(&real);
    let current = match std::fs::read_to_string(&real) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(std::io::Error::new(e.kind(), format!("cannot read {shown}: {e}"))),
    };
    let (text, layout_kept) = match (&current, replacement) {
        // (a file that parses to the running config or to the edited one is valid: only
        // another config is validated to tell "changed by hand" from "does not load")
        (Some(text), _) => match parse(text).and_then(|c| if &c == old || &c == new { Ok(c) } else { c.validate().map(|()| c).map_err(|e| e.to_string()) }) {
            // An edit by hand since the daemon loaded the file would be overwritten
            // silently: refuse instead, unless the file already holds what we are about to
            // write (e.g. `spillwayctl config apply` of the edited file itself).
            Ok(on_disk) if &on_disk == old || &on_disk == new => render(Some(text), old, new, generation),
            Ok(_) => {
                return Err(std::io::Error::other(format!(
                    "{shown} was changed by hand since the daemon loaded it (it no longer matches the running config); \
                     apply it with `spillwayctl config apply {}` or restart, then retry the edit",
                    path.display()
                )))
            }
            Err(_) if replacement.is_some() => replacement_text(replacement.unwrap_or_default(), new, generation),
            Err(e) => {
                return Err(std::io::Error::other(format!(
                    "{shown} does not load any more (edited by hand?): {e}. Live edits are refused until it does: \
                     fix it by hand (the last good version is {}), or replace it with `spillwayctl config apply GOOD.toml` \
                     (the applied file's text, comments included, is written to it), then retry the edit",
                    bak.display()
                )))
            }
        },
        (None, Some(r)) => replacement_text(r, new, generation),
        (None, None) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "{shown} no longer exists (deleted or moved since the daemon loaded it); a live edit would write it anew \
                     without its comments. Restore it (the last good version is {}), or write it with \
                     `spillwayctl config apply GOOD.toml`, then retry the edit",
                    bak.display()
                ),
            ))
        }
    };
    Ok((real, text, layout_kept))
}

/// `text` as the daemon would load it at start: parsed and validated (`Config::load`'s
/// rules), so that a file that parses but would not start the daemon counts as broken.
fn loads(text: &str) -> Result<Config, String> {
    let cfg = parse(text)?;
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// [`Config::from_toml`] of the config file's text, through a parse cache of the file's
/// last texts ([`Config::from_toml_cached`]: the same result, errors included): a write-back
/// reads the file, merges the edit into it and parses the result again, and the file
/// differs from one edit to the next by the edited service only, so each parse after the
/// first parses only the services whose text changed (at 2,000 services, a whole parse is
/// tens of ms, and an edit made three). Holds about one copy of the file's services.
fn parse(text: &str) -> Result<Config, String> {
    static CACHE: std::sync::Mutex<Option<spillway_shared::config::chunked::ParseCache>> = std::sync::Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    Config::from_toml_cached(text, cache.get_or_insert_with(Default::default))
}

/// For a `config apply` of `text` that leaves the running config `running` unchanged:
/// writes the config file anew from `text` (our header with `generation` in front) when the
/// file is missing or does not load (parse and validate), and refreshes `FILE.bak`;
/// `Ok(None)` (nothing written) when the file loads. Errors: reading or writing before the rename.
pub fn restore(path: &Path, running: &Config, generation: u64, text: &str) -> std::io::Result<Option<Written>> {
    if !restore_due(path)? {
        return Ok(None);
    }
    let real = resolve(path)?;
    let (text, layout_kept) = replacement_text(text, running, generation);
    let durable = write_atomic(&real, &text)?;
    keep_last_good(&real, &text);
    let not_durable = match durable {
        Durable::Yes => None,
        Durable::DirectoryNotSynced(e) => Some(e.to_string()),
    };
    Ok(Some(Written { text, layout_kept, path: real, not_durable }))
}

/// Whether [`restore`] would write the config file at `path` anew (it is missing or does
/// not load), or the error it would meet first (resolving or reading it): the dry run of a
/// `config apply` that changes nothing says what the apply would do (review).
pub fn restore_due(path: &Path) -> std::io::Result<bool> {
    let real = resolve(path)?;
    match std::fs::read_to_string(&real) {
        Ok(t) => Ok(loads(&t).is_err()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(e),
    }
}

/// Why the next live edit that changes something would be refused because of the config
/// file at `path` ([`write_back`]'s refusals), as a sentence with the way out: missing,
/// unreadable, not loading, or changed by hand (it loads, but not to `running`). `None`
/// when the file holds the running config. For the answer of an edit that changes nothing,
/// which writes no file and so would otherwise say nothing of it (fresh-user QA).
pub fn file_problem(path: &Path, running: &Config) -> Option<String> {
    let shown = path.display();
    let real = resolve(path);
    let bak = real.as_ref().map_or_else(|_| format!("{shown}.bak"), |r| backup_path(r).display().to_string());
    let fix = format!("fix it by hand (the last good version is {bak}) or replace it with `spillwayctl config apply GOOD.toml`");
    let real = match real {
        Ok(r) => r,
        Err(e) => return Some(format!("{shown} cannot be followed ({e}): the next edit that changes something will be refused; {fix}")),
    };
    match std::fs::read_to_string(&real) {
        Ok(t) => match loads(&t) {
            Ok(c) if &c == running => None,
            Ok(_) => Some(format!("{shown} was changed by hand since the daemon loaded it: the next edit that changes something will be refused; apply it with `spillwayctl config apply {shown}` or restart")),
            Err(e) => Some(format!("{shown} does not load ({e}): the next edit that changes something will be refused; {fix}")),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(format!("{shown} is missing: the next edit that changes something will be refused; {fix}")),
        Err(e) => Some(format!("cannot read {shown} ({e}): the next edit that changes something will be refused; {fix}")),
    }
}

/// At start: keeps the config file at `path` as `FILE.bak` ([`keep_last_good`]) if it
/// still parses to `loaded`, the config the daemon started from (a file changed since it
/// was read is not taken as good). Failures are logged, never fatal.
pub fn keep_loaded(path: &Path, loaded: &Config) {
    let Ok(real) = resolve(path) else { return };
    match std::fs::read_to_string(&real) {
        Ok(text) if Config::from_toml(&text).is_ok_and(|c| &c == loaded) => keep_last_good(&real, &text),
        Ok(_) => tracing::warn!(path = %real.display(), "the config file changed while the daemon started: not kept as the last good file"),
        Err(e) => tracing::warn!(path = %real.display(), error = %e, "cannot read the config file again to keep it as the last good file"),
    }
}

/// Frees `garbage` (a config or a document as large as the file: milliseconds to free at
/// 20,000 endpoints) on a short-lived thread, off the path of the edit's answer; here if no
/// thread can be started.
pub(super) fn free_elsewhere<T: Send + 'static>(garbage: T) {
    if let Err(e) = std::thread::Builder::new().name("config-free".into()).spawn(move || drop(garbage)) {
        tracing::debug!(error = %e, "no thread to free a replaced config on: freed inline");
    }
}

/// `current` with the difference between `old` and `new` applied, if it re-parses to `new`.
fn merged(current: &str, old: &Config, new: &Config, generation: u64) -> Option<String> {
    let mut doc: DocumentMut = current.parse().ok()?;
    let old_t = toml::Table::try_from(old).ok()?;
    let new_t = toml::Table::try_from(new).ok()?;
    merge_table(doc.as_table_mut(), &old_t, &new_t, false);
    // Our header line goes wherever it stood (a key added at the root is written above
    // the first table, so it may no longer be the first line): one header, on top.
    let body: String = doc.to_string().split_inclusive('\n').filter(|l| !l.starts_with(HEADER_PREFIX)).collect();
    // The document and both tables are as large as the file (20,000 endpoints: ~30 % of a
    // write-back to free): freed on a short-lived thread, not before the edit's answer.
    free_elsewhere((doc, old_t, new_t));
    let text = format!("{HEADER_PREFIX}{generation}) after a live edit; comments and layout are kept.\n{body}");
    match parse(&text) {
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
            // An array of tables emptied (`[[zones]]` all removed): the key goes, rather
            // than a `zones = []` written above the first table (the merged text must
            // still parse to `new`, else the file is written in canonical form).
            Some(toml::Value::Array(a)) if a.is_empty() && !inline && doc.get(k).is_some_and(Item::is_array_of_tables) => {
                doc.remove(k);
            }
            Some(n) => match doc.get_key_value_mut(k) {
                Some((mut key, item)) => {
                    let was_value = item.is_value();
                    merge_item(item, o, n, inline);
                    // `backends = []` turned into `[[services.backends]]`: the key keeps
                    // the decor of `backends = ` (a space before `=`), which would end up in
                    // the header (QA: `[[services.backends ]]`)
                    if was_value && item.is_array_of_tables() {
                        key.leaf_decor_mut().clear();
                    }
                }
                None => {
                    doc.insert(k, new_item(n, inline));
                }
            },
        }
    }
}

/// Merges `old` -> `new` into `item`; `inline`: `item` is inside an inline table (only
/// values may go in).
fn merge_item(item: &mut Item, old: Option<&toml::Value>, new: &toml::Value, inline: bool) {
    let empty = toml::Table::new();
    let old_table = old.and_then(toml::Value::as_table).unwrap_or(&empty);
    let tables = |n: &Vec<toml::Value>| !n.is_empty() && n.iter().all(toml::Value::is_table);
    match (item, new) {
        (Item::Table(t), toml::Value::Table(n)) => merge_table(t, old_table, n, false),
        (Item::Value(Value::InlineTable(t)), toml::Value::Table(n)) => merge_table(t, old_table, n, true),
        (Item::ArrayOfTables(a), toml::Value::Array(n)) if tables(n) => {
            merge_array_of_tables(a, old.and_then(toml::Value::as_array).map_or(&[], Vec::as_slice), n)
        }
        // an inline array (`zones = []`) that now holds tables is written as `[[zones]]`
        (item @ Item::Value(Value::Array(_)), toml::Value::Array(n)) if !inline && tables(n) => *item = Item::ArrayOfTables(new_array_of_tables(n)),
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
    // By name (unique, checked above): a lookup each, not a search per element (2,000
    // services: millions of name comparisons per edit).
    let old_by_name: std::collections::HashMap<&str, &toml::Value> = old.iter().filter_map(|o| Some((name_of(o)?, o))).collect();
    let doc_at: std::collections::HashMap<&str, usize> = doc_names.iter().enumerate().filter_map(|(i, n)| Some((n.as_deref()?, i))).collect();
    // The kept elements the file writes, with their running values: a new element leaves
    // out a key that one of them leaves to its default when it has that value (QA: a
    // backend added live was written with `enabled = true` and `weight = 50` when the
    // first backend wrote its weight), and an empty array (`backends = []`: the default).
    // Copied only when an element is new (an edit of existing ones needs none).
    let adds = new.iter().any(|n| name_of(n).is_none_or(|name| !doc_at.contains_key(name)));
    let models: Vec<(Table, toml::Table)> = if adds {
        doc.iter()
            .zip(&doc_names)
            .filter_map(|(t, n)| {
                let o = old_by_name.get(n.as_deref()?)?.as_table()?;
                Some((t.clone(), o.clone()))
            })
            .collect()
    } else {
        Vec::new()
    };
    // the file's tables, taken out (not copied) before the array is rebuilt
    let mut tables: Vec<Option<Table>> = doc.iter_mut().map(|t| Some(std::mem::take(t))).collect();
    doc.clear();
    for n in new {
        let name = name_of(n);
        let o = name.and_then(|name| old_by_name.get(name)).and_then(|o| o.as_table());
        let kept = name.and_then(|name| doc_at.get(name)).and_then(|&i| tables[i].take());
        match (kept, n.as_table()) {
            (Some(mut t), Some(nt)) => {
                merge_table(&mut t, o.unwrap_or(&toml::Table::new()), nt, false);
                doc.push(t);
            }
            (_, Some(nt)) => {
                let defaulted = |k: &str, v: &toml::Value| {
                    matches!(v, toml::Value::Array(a) if a.is_empty()) || models.iter().any(|(t, o)| !t.contains_key(k) && o.get(k) == Some(v))
                };
                let mut t = Table::new();
                for (k, v) in nt.iter().filter(|(k, _)| k.as_str() == "name").chain(nt.iter().filter(|(k, v)| k.as_str() != "name" && !defaulted(k, v))) {
                    t.insert(k, new_item(v, false));
                }
                doc.push(t);
            }
            (_, None) => {}
        }
    }
    keep_new_order(doc);
}

/// Gives the elements of an array of tables, and the tables nested in them, the document
/// positions they held, in the array's new order. toml_edit writes a document's tables
/// sorted by position, so elements kept in a new order (a `config apply` that swaps two
/// backends' names, or reorders services) were written in the file's old order: the file
/// then no longer parsed to the new config and was written in canonical form, its comments
/// lost. Elements created here have no position and follow the one before them.
fn keep_new_order(doc: &mut ArrayOfTables) {
    fn positions(t: &Table, out: &mut Vec<usize>) {
        out.extend(t.position());
        for (_, item) in t.iter() {
            match item {
                Item::Table(s) => positions(s, out),
                Item::ArrayOfTables(a) => a.iter().for_each(|s| positions(s, out)),
                _ => {}
            }
        }
    }
    fn assign(t: &mut Table, next: &mut impl Iterator<Item = usize>) {
        if t.position().is_some() {
            if let Some(p) = next.next() {
                t.set_position(p);
            }
        }
        for (_, item) in t.iter_mut() {
            match item {
                Item::Table(s) => assign(s, next),
                Item::ArrayOfTables(a) => a.iter_mut().for_each(|s| assign(s, next)),
                _ => {}
            }
        }
    }
    let own: Vec<usize> = doc.iter().filter_map(Table::position).collect();
    if own.windows(2).all(|w| w[0] < w[1]) {
        return;
    }
    let mut all = Vec::new();
    doc.iter().for_each(|t| positions(t, &mut all));
    all.sort_unstable();
    let mut next = all.into_iter();
    doc.iter_mut().for_each(|t| assign(t, &mut next));
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

#[cfg(test)]
mod tests;
