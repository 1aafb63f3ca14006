//! The error of a configuration check and the rules every section shares: [`ConfigError`]
//! (field path, value, rule), [`LoadError`] (reading a file), the name rule
//! ([`check_name`]) and [`is_prime`] (Maglev table sizes). A leaf: it imports no other part
//! of the configuration, so every section and the range table can use it.

/// A configuration problem: `path` is the TOML path of the field (e.g.
/// `services[0].backends[2].weight`), `value` what was given and `allowed` the rule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path} = {value}: {allowed}")]
pub struct ConfigError {
    /// Field path, e.g. `services[0].spillover_ratio`.
    pub path: String,
    /// The offending value as written (a long one cut, see [`ConfigError::new`]).
    pub value: String,
    /// What is allowed, e.g. `must be in [0.0, 1.0] (spec/zonal-affinity.md)`.
    pub allowed: String,
}

impl ConfigError {
    /// Builds an error from its three parts. A value longer than [`MAX_ECHOED_VALUE`]
    /// characters is echoed as its head and last 20 characters with its length between (an error must stay readable whatever
    /// was written).
    pub fn new(path: impl Into<String>, value: impl ToString, allowed: impl Into<String>) -> Self {
        let mut value = value.to_string();
        let n = value.chars().count();
        if n > MAX_ECHOED_VALUE {
            // the head and the tail (which may carry a length or a closing quote)
            let head: String = value.chars().take(MAX_ECHOED_VALUE - 20).collect();
            let tail: String = value.chars().skip(n - 20).collect();
            value = format!("{head}…[{n} characters]…{tail}");
        }
        ConfigError { path: path.into(), value, allowed: allowed.into() }
    }
    /// The last component of the path without indices (`spillover_ratio`).
    pub fn field(&self) -> &str {
        let last = self.path.rsplit('.').next().unwrap_or(&self.path);
        last.split('[').next().unwrap_or(last)
    }
}

/// Most characters of a value an error echoes ([`ConfigError::new`]).
pub const MAX_ECHOED_VALUE: usize = 120;

/// Errors of loading a config file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// File path.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
    /// TOML syntax or type error (the text names line and column).
    #[error("{path}: {message}")]
    Parse {
        /// File path.
        path: String,
        /// Parser message.
        message: String,
    },
    /// A value out of range.
    #[error("{path}: {source}")]
    Invalid {
        /// File path.
        path: String,
        /// The rule broken.
        source: ConfigError,
    },
}

/// The one rule for service, backend, endpoint and zone names (docs/config.md "Names"):
/// they appear in log lines, metrics labels, CLI arguments and file paths.
pub const NAME_RULE: &str = "must be 1 to 63 characters, each an ASCII letter, a digit, '.', '_' or '-' (no spaces, '/' or control characters)";

/// Checks `name` against [`NAME_RULE`]; the error shows the value quoted, so an empty name
/// or a newline is visible.
pub fn check_name(path: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty() && name.len() <= 63 && name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(path, format!("{name:?}"), NAME_RULE))
    }
}

/// Whether `n` is prime (trial division; `n` ≤ 2^20 here).
pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u32;
    while d.saturating_mul(d) <= n {
        if (n / d) * d == n {
            return false;
        }
        d += 1;
    }
    true
}
