//! The small TOML configs of the unit tests, built section by section (`#[cfg(test)]`): the
//! ports, services and backends most tests start from, with each test's own lines added
//! where they belong. Every value is spelled as in a config file (docs/config.md), in the
//! order given, so a test still reads as the file it stands for; [`Toml::config`] parses
//! and validates it as the daemon does.

use spillway_shared::config::Config;

/// A config file's text, grown by [`Toml::section`], [`Toml::port`], [`Toml::service`] and
/// [`Toml::backend`] in file order (a `[[services.backends]]` belongs to the service before
/// it). `lines` arguments are `key = value` lines separated by `\n`, added as given (empty:
/// none).
#[derive(Clone, Debug, Default)]
pub(crate) struct Toml(String);

impl Toml {
    /// An empty file.
    pub(crate) fn new() -> Toml {
        Toml::default()
    }

    /// `header` (`[neighbors]`, `[[ports]]`, ...), its `fields` (lines ending in `\n`),
    /// then `lines`.
    fn add(mut self, header: &str, fields: &str, lines: &str) -> Toml {
        self.0 += header;
        self.0.push('\n');
        self.0 += fields;
        if !lines.is_empty() {
            self.0 += lines;
            self.0.push('\n');
        }
        self
    }

    /// A table `[name]` with `lines`.
    pub(crate) fn section(self, name: &str, lines: &str) -> Toml {
        self.add(&format!("[{name}]"), "", lines)
    }

    /// `[[ports]]` `name` on DPDK device `device`, with `lines` (`address`, `address6`,
    /// `gateway`, `forward_to`, ...).
    pub(crate) fn port(self, name: &str, device: &str, lines: &str) -> Toml {
        self.add("[[ports]]", &format!("name = \"{name}\"\ndevice = \"{device}\"\n"), lines)
    }

    /// `[[services]]` `name` on `vip`:`port` (TCP unless `lines` give `protocol`), with
    /// `lines`.
    pub(crate) fn service(self, name: &str, vip: &str, port: u16, lines: &str) -> Toml {
        self.add("[[services]]", &format!("name = \"{name}\"\nvip = \"{vip}\"\nport = {port}\n"), lines)
    }

    /// `[[services.backends]]` `name` at `address`, of the service added last, with `lines`
    /// (`mac`, `weight`, ...).
    pub(crate) fn backend(self, name: &str, address: &str, lines: &str) -> Toml {
        self.add("[[services.backends]]", &format!("name = \"{name}\"\naddress = \"{address}\"\n"), lines)
    }

    /// The text as a config file holds it.
    pub(crate) fn text(&self) -> &str {
        &self.0
    }

    /// The text parsed (`Config::from_toml`), not validated; panics on a parse error.
    pub(crate) fn parsed(&self) -> Config {
        Config::from_toml(&self.0).unwrap_or_else(|e| panic!("{e}\n{}", self.0))
    }

    /// The text parsed and validated (`Config::validate`); panics on an error.
    pub(crate) fn config(&self) -> Config {
        let c = self.parsed();
        c.validate().unwrap_or_else(|e| panic!("{e}\n{}", self.0));
        c
    }
}

#[cfg(test)]
mod tests {
    use super::Toml;

    /// The builder writes what a hand-written file holds: the same `Config`.
    #[test]
    fn builds_the_file_it_stands_for() {
        let built = Toml::new()
            .section("neighbors", "retry_ms = 200")
            .port("p0", "net_null0", "address = \"10.0.0.1\"")
            .service("web", "10.0.0.100", 80, "")
            .backend("b1", "10.0.0.11", "mac = \"02:00:00:00:00:11\"")
            .backend("b2", "10.0.0.12", "");
        let by_hand = "[neighbors]\nretry_ms = 200\n[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.1\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.0.11\"\nmac = \"02:00:00:00:00:11\"\n[[services.backends]]\nname = \"b2\"\naddress = \"10.0.0.12\"\n";
        assert_eq!(built.text(), by_hand);
        assert_eq!(built.config(), spillway_shared::config::Config::from_toml(by_hand).unwrap());
    }
}
