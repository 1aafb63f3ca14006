//! The command examples of README.md, docs/ctl.md and docs/operations.md run against a real
//! daemon (or, for `$ spillway ... --check`, the daemon binary's config check), and their
//! output must match the docs (docs that cannot drift).
//!
//! In those files, an indented code line `$ spillwayctl ARGS` (continued by a trailing `\`)
//! is run, and the indented lines after it, up to the next `$` line or the end of the
//! block, are its expected output (stdout and stderr; trailing blank lines ignored). Other
//! `$` lines (`cp`, `spillway --config ... &`) are what this test does itself: it starts
//! `spillway` on a copy of `examples/null.toml` in a temporary directory — never on the
//! tracked file. Paths `/tmp/spw*` in commands and output stand for that directory's
//! files (`/tmp/spw.sock` the socket, `/tmp/spw.toml` the config); `--socket` is added when a
//! command lacks it.
//!
//! Matching: a line `...` stands for any number of lines; `[..]` inside a line for any
//! text; volatile fields (uptime, snapshot age, propagation time, poll counters) are
//! masked on both sides. A command whose expected output has a line starting
//! `spillwayctl:`, `spillway: error:` or `error: ` must exit non-zero, any other must exit 0.
//!
//! `SPILLWAY_BLESS=1 cargo test -p spillway-ctl --test doc_examples` rewrites the expected
//! outputs from the real ones (then put back the `...` elisions you want).

mod common;

use common::{null_example, repo, Daemon};
use std::path::Path;
use std::process::Command;

struct Example {
    /// Line index of the `$` line in the file.
    line: usize,
    /// Lines it spans (command + continuations).
    cmd_lines: usize,
    /// The command after `$ `, continuations joined.
    cmd: String,
    /// Expected output lines (indent removed).
    expected: Vec<String>,
    /// Indent of the block.
    indent: usize,
}

fn parse(text: &str) -> Vec<Example> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut fenced = false;
    while i < lines.len() {
        let l = lines[i];
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let indent = l.len() - l.trim_start().len();
        if !fenced && indent >= 4 && l.trim_start().starts_with("$ ") {
            let start = i;
            let mut cmd = l.trim_start()[2..].trim_end().to_string();
            while cmd.ends_with('\\') && i + 1 < lines.len() {
                cmd.pop();
                i += 1;
                cmd.push(' ');
                cmd.push_str(lines[i].trim());
            }
            let cmd_lines = i - start + 1;
            let mut expected = Vec::new();
            i += 1;
            while i < lines.len() {
                let l = lines[i];
                let ind = l.len() - l.trim_start().len();
                if l.trim().is_empty() {
                    expected.push(String::new());
                } else if ind >= indent && !l.trim_start().starts_with("$ ") {
                    expected.push(l[indent..].to_string());
                } else {
                    break;
                }
                i += 1;
            }
            while expected.last().is_some_and(|l| l.is_empty()) {
                expected.pop();
            }
            out.push(Example { line: start, cmd_lines, cmd: cmd.split_whitespace().collect::<Vec<_>>().join(" "), expected, indent });
            continue;
        }
        i += 1;
    }
    out
}

/// Splits a command line into words (double or single quotes group; no other shell syntax).
fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn masks() -> Vec<(regex::Regex, &'static str)> {
    [
        (r"up \d+(\.\d+)? s", "up [T] s"),
        // `stats` WORKERS rows: the last column (idle_polls) grows while the daemon idles.
        (r"^(  \d+ +\d+ +\d+ +\d+ +\d+ +\d+ +\d+ +\d+) +\d+$", "${1} [N]"),
        (r"age \d+ ms", "age [T] ms"),
        (r"last propagation (\d+ µs|-|none)", "last propagation [T]"),
        (r#""(uptime_sec|age_ms|last_propagation_us|polls|idle_polls|since_change_sec)": [0-9.e+-]+"#, r#""$1": [N]"#),
    ]
    .into_iter()
    .map(|(r, m)| (regex::Regex::new(r).unwrap(), m))
    .collect()
}

fn mask(s: &str, m: &[(regex::Regex, &'static str)]) -> String {
    let mut s = s.to_string();
    for (r, rep) in m {
        s = r.replace_all(&s, *rep).into_owned();
    }
    s
}

fn line_matches(want: &str, have: &str) -> bool {
    if !want.contains("[..]") {
        return want.trim_end() == have.trim_end();
    }
    let parts: Vec<&str> = want.trim_end().split("[..]").collect();
    let have = have.trim_end();
    let mut pos = 0;
    for (k, p) in parts.iter().enumerate() {
        if k == 0 {
            if !have.starts_with(p) {
                return false;
            }
            pos = p.len();
        } else if k == parts.len() - 1 {
            return have.len() >= pos + p.len() && have[pos..].ends_with(p);
        } else {
            match have[pos..].find(p) {
                Some(at) => pos += at + p.len(),
                None => return false,
            }
        }
    }
    pos == have.len()
}

/// Matches lines with `...` as "any lines" (backtracking).
fn lines_match(want: &[String], have: &[String]) -> bool {
    match want.first() {
        None => have.is_empty(),
        Some(w) if w.trim() == "..." => (0..=have.len()).any(|k| lines_match(&want[1..], &have[k..])),
        Some(w) => !have.is_empty() && line_matches(w, &have[0]) && lines_match(&want[1..], &have[1..]),
    }
}

/// Runs the `$ spillwayctl` examples of `doc` against `d`; returns the failures (and the
/// blessed text).
fn run_doc(doc: &Path, d: &Daemon) -> (Vec<String>, String) {
    let text = std::fs::read_to_string(doc).unwrap();
    let m = masks();
    let tmp = d.dir.to_string_lossy().to_string();
    let mut failures = Vec::new();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut shift: isize = 0;
    let mut ran = 0;
    for ex in parse(&text) {
        let w = words(&ex.cmd);
        // `spillwayctl ...` against the daemon, or `spillway ... --check` (no DPDK)
        let check = w.first().map(String::as_str) == Some("spillway") && w.iter().any(|a| a == "--check");
        if w.first().map(String::as_str) != Some("spillwayctl") && !check {
            continue;
        }
        let mut args: Vec<String> = w[1..].iter().map(|a| a.replace("/tmp/spw", &format!("{tmp}/spw"))).collect();
        if !check && !args.iter().any(|a| a == "--socket") {
            args.insert(0, d.socket.to_string_lossy().to_string());
            args.insert(0, "--socket".into());
        }
        let bin = if check { common::daemon_bin() } else { common::ctl_bin() };
        let o = Command::new(bin).args(&args).current_dir(repo()).output().expect("run the example");
        ran += 1;
        let raw = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        let raw = raw.replace(&format!("{tmp}/spw"), "/tmp/spw").replace(&tmp, "/tmp/spw.d");
        let mut have: Vec<String> = raw.lines().map(|l| l.trim_end().to_string()).collect();
        while have.last().is_some_and(|l| l.is_empty()) {
            have.pop();
        }
        let want_fail = ex.expected.iter().any(|l| l.starts_with("spillwayctl:") || l.starts_with("spillway: error:") || l.starts_with("error: "));
        let masked_have: Vec<String> = have.iter().map(|l| mask(l, &m)).collect();
        let masked_want: Vec<String> = ex.expected.iter().map(|l| mask(l, &m)).collect();
        let ok_output = lines_match(&masked_want, &masked_have);
        let ok_code = o.status.success() != want_fail;
        if !ok_output || !ok_code {
            failures.push(format!(
                "{}:{}: $ {}\n--- expected (exit {}) ---\n{}\n--- got (exit {:?}) ---\n{}\n",
                doc.display(),
                ex.line + 1,
                ex.cmd,
                if want_fail { "non-zero" } else { "0" },
                ex.expected.join("\n"),
                o.status.code(),
                have.join("\n")
            ));
            let at = (ex.line as isize + shift) as usize + ex.cmd_lines;
            let old = ex.expected.len();
            let pad = " ".repeat(ex.indent);
            let new: Vec<String> = have.iter().map(|l| if l.is_empty() { String::new() } else { format!("{pad}{l}") }).collect();
            shift += new.len() as isize - old as isize;
            lines.splice(at..at + old, new);
        }
    }
    assert!(ran > 0, "{}: no `$ spillwayctl` examples found", doc.display());
    let mut blessed = lines.join("\n");
    blessed.push('\n');
    (failures, blessed)
}

/// The capture of docs/ctl.md "replay": 16 TCP connections to 10.0.0.100:80 from clients
/// 10.1.0.10+i (zone z1, i even) and 10.2.0.10+i (z2, i odd), port 40000+i, 1 ms apart: a
/// SYN and a request each, and a FIN from the first eight.
fn write_replay_capture(path: &Path) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let frame = |i: usize, flags: u8| {
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0x10, 5], [2, 0, 0, 0, 0, 1]).ipv4([10, 1 + (i % 2) as u8, 0, 10 + i as u8], [10, 0, 0, 100], 64);
        let b = match flags {
            0 => b.tcp(40000 + i as u16, 80, 1, 1024).syn(),
            1 => b.tcp(40000 + i as u16, 80, 2, 1024).ack(1),
            _ => b.tcp(40000 + i as u16, 80, 7, 1024).ack(1).fin(),
        };
        let mut out = Vec::new();
        b.write(&mut out, if flags == 1 { b"GET /" } else { b"" }).unwrap();
        out
    };
    let mut frames: Vec<Vec<u8>> = (0..16).flat_map(|i| [frame(i, 0), frame(i, 1)]).collect();
    frames.extend((0..8).map(|i| frame(i, 2)));
    let mut w = PcapWriter::with_header(std::fs::File::create(path).unwrap(), PcapHeader::default()).unwrap();
    for (k, f) in frames.iter().enumerate() {
        let ts = std::time::Duration::from_secs(1_700_000_000) + std::time::Duration::from_millis(k as u64);
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f)).unwrap();
    }
}

fn check(doc: &str, name: &str) {
    let d = Daemon::start(name, &null_example());
    // Files the examples of docs/ctl.md apply: the running config with one change, and one
    // with a change that needs a restart.
    let base = null_example();
    let b3 = "mac = \"02:00:00:00:0b:03\"\nzone = \"z2\"\n";
    assert!(base.contains(b3), "examples/null.toml changed: b3 not found");
    let new = base.replacen(b3, &format!("{b3}weight = 77\n"), 1);
    std::fs::write(d.dir.join("spw-new.toml"), new).unwrap();
    std::fs::write(d.dir.join("spw-restart.toml"), base.replace("workers = 2", "workers = 1")).unwrap();
    // docs/operations.md "Checking a config": a port device DPDK would refuse
    let dev = "device = \"net_null0,no-rx=1\"";
    assert!(base.contains(dev), "examples/null.toml changed: the port device not found");
    std::fs::write(d.dir.join("spw-afp.toml"), base.replace(dev, "device = \"net_af_packet0\"")).unwrap();
    // docs/ctl.md "replay": a baseline, the same with b2 disabled, without b2, and a capture
    std::fs::write(d.dir.join("spw-replay-old.toml"), &base).unwrap();
    let b2 = "name = \"b2\"\n";
    assert!(base.contains(b2), "examples/null.toml changed: b2 not found");
    std::fs::write(d.dir.join("spw-replay-new.toml"), base.replacen(b2, &format!("{b2}enabled = false\n"), 1)).unwrap();
    let at = base.find(&format!("[[services.backends]]\n{b2}")).expect("b2's table");
    let end = base[at + 1..].find("[[").map_or(base.len(), |e| at + 1 + e);
    std::fs::write(d.dir.join("spw-replay-gone.toml"), format!("{}{}", &base[..at], &base[end..])).unwrap();
    write_replay_capture(&d.dir.join("spw-replay.pcap"));
    let path = repo().join(doc);
    let (failures, blessed) = run_doc(&path, &d);
    if failures.is_empty() {
        return;
    }
    if std::env::var_os("SPILLWAY_BLESS").is_some() {
        std::fs::write(&path, blessed).unwrap();
        eprintln!("rewrote {doc}:\n{}", failures.join("\n"));
        return;
    }
    panic!("{} example(s) in {doc} differ from the product (SPILLWAY_BLESS=1 rewrites them):\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn docs_ctl_md_examples_hold() {
    check("docs/ctl.md", "doc-ctl");
}

#[test]
fn readme_examples_hold() {
    check("README.md", "doc-readme");
}

/// docs/operations.md's `spillway --check` examples.
#[test]
fn operations_md_examples_hold() {
    check("docs/operations.md", "doc-ops");
}

#[test]
fn matcher_is_strict_where_it_should_be() {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert!(lines_match(&v(&["a", "...", "d"]), &v(&["a", "b", "c", "d"])));
    assert!(!lines_match(&v(&["a", "...", "d"]), &v(&["a", "b", "c"])));
    assert!(!lines_match(&v(&["a", "b"]), &v(&["a", "b", "c"])));
    assert!(line_matches("x [..] z", "x yyy z"));
    assert!(!line_matches("x [..] z", "x yyy q"));
    assert_eq!(words(r#"a "b c" d='e f'"#), vec!["a", "b c", "d=e f"]);
    assert_eq!(mask("up 12.5 s", &masks()), "up [T] s");
}

#[test]
fn masks_stats_idle_polls() {
    let m = masks();
    assert_eq!(
        mask("  0                 0            0            0          0          0          0          0           41", &m),
        mask("  0                 0            0            0          0          0          0          0          123", &m)
    );
}

/// The examples in `--help` texts are accepted by the product (help once
/// showed a `zonal_affinity` value the daemon refused).
#[test]
fn help_examples_are_accepted() {
    let d = Daemon::start("help", &null_example());
    let re = regex::Regex::new(r"`((?:service|backend) (?:add|set) [^`]+)`").unwrap();
    let mut ran = 0;
    for sub in [["service", "add"], ["service", "set"], ["backend", "add"], ["backend", "set"]] {
        let o = Command::new(common::ctl_bin()).args(sub).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&o.stdout).to_string();
        let examples: Vec<String> = re.captures_iter(&help).map(|c| c[1].to_string()).collect();
        assert!(!examples.is_empty(), "`spillwayctl {} --help` shows no example:\n{help}", sub.join(" "));
        for ex in examples {
            let args: Vec<&str> = ex.split_whitespace().collect();
            let out = d.ok(&args);
            assert!(out.starts_with("applied:"), "{ex}: {out}");
            ran += 1;
        }
    }
    assert_eq!(ran, 4);
}
