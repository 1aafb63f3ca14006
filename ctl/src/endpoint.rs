//! `spillwayctl endpoint add|remove|set`: live edits of the endpoints of a backend group
//! (`[[services.backends.endpoints]]`, docs/config.md "Backend groups"). The daemon's edit
//! engine validates them like the file and writes them back with comments kept.

use crate::fields::with_fields;
use crate::live::{mutate, MutOpts};
use clap::Subcommand;
use spillway_shared::proto::Request;
use std::path::Path;

/// `endpoint ...`
#[derive(Subcommand, Debug)]
pub enum EndpointCmd {
    /// Add an endpoint to a backend: `endpoint add web g1 e3 address=10.0.1.13
    /// mac=02:00:00:00:01:13 weight=50`. A single-endpoint backend becomes a group whose
    /// first endpoint is its old address, named like the backend.
    Add {
        /// Service name.
        service: String,
        /// Backend name.
        backend: String,
        /// Endpoint name (unique within the backend).
        name: String,
        /// `field=value` pairs: address (required), mac, weight (1–1000), enabled.
        #[arg(value_name = "FIELD=VALUE")]
        fields: Vec<String>,
        #[command(flatten)]
        opts: MutOpts,
    },
    /// Remove an endpoint of a group (a backend keeps at least one).
    Remove {
        /// Service name.
        service: String,
        /// Backend name.
        backend: String,
        /// Endpoint name (or its address when it has no name).
        name: String,
        #[command(flatten)]
        opts: MutOpts,
    },
    /// Set fields of an endpoint: `endpoint set web g1 e3 weight=80 enabled=false`.
    Set {
        /// Service name.
        service: String,
        /// Backend name.
        backend: String,
        /// Endpoint name (or its address when it has no name).
        name: String,
        /// `field=value` pairs (at least one).
        #[arg(value_name = "FIELD=VALUE")]
        fields: Vec<String>,
        #[command(flatten)]
        opts: MutOpts,
    },
}

/// Runs an `endpoint` command; exit code as for the other edits (0 applied, 1 refused,
/// 2 daemon unreachable).
pub fn run(socket: &Path, cmd: &EndpointCmd) -> i32 {
    let (s, b, n) = match cmd {
        EndpointCmd::Add { service, backend, name, .. } | EndpointCmd::Remove { service, backend, name, .. } | EndpointCmd::Set { service, backend, name, .. } => {
            (service.clone(), backend.clone(), name.clone())
        }
    };
    let example = match cmd {
        EndpointCmd::Add { .. } => "endpoint add web g1 e3 address=10.0.1.13",
        EndpointCmd::Remove { .. } => "endpoint remove web g1 e3",
        EndpointCmd::Set { .. } => "endpoint set web g1 e3 weight=80",
    };
    if let Err(c) = crate::fields::name_given("endpoint", &n, example) {
        return c;
    }
    let (req, opts) = match cmd {
        EndpointCmd::Add { fields, opts, .. } => {
            match with_fields(fields, example, |f| Request::EndpointAdd { service: s, backend: b, name: n, fields: f, if_generation: opts.if_generation }) {
                Ok(r) => (r, *opts),
                Err(c) => return c,
            }
        }
        EndpointCmd::Remove { opts, .. } => (Request::EndpointRemove { service: s, backend: b, name: n, if_generation: opts.if_generation }, *opts),
        EndpointCmd::Set { fields, opts, .. } => {
            if let Err(c) = crate::fields::fields_given(fields, example) {
                return c;
            }
            match with_fields(fields, example, |f| Request::EndpointSet { service: s, backend: b, name: n, fields: f, if_generation: opts.if_generation }) {
                Ok(r) => (r, *opts),
                Err(c) => return c,
            }
        }
    };
    mutate(socket, req, opts)
}
