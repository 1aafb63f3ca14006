//! The control socket's dispatch: each [`Request`] to the [`Daemon`] view or edit that
//! answers it (`views.rs`, `edits.rs`, `transaction.rs`, the dry run, drop capture, VIP
//! drains). Kept apart from `daemon.rs`, which holds the state, so the daemon does not
//! depend on what serves it.

use super::server::Handler;
use crate::daemon::Daemon;
use spillway_shared::proto::{Request, Response};

impl Handler for Daemon {
    fn handle(&self, req: Request) -> Response {
        match req {
            Request::Status => Response::Status(self.status()),
            Request::ConfigShow => self.config_show(),
            Request::ServiceShow { name } => self.service_show(&name),
            Request::ConfigApply { toml, if_generation } => self.config_apply(&toml, if_generation),
            r @ (Request::ServiceAdd { .. }
            | Request::ServiceRemove { .. }
            | Request::ServiceSet { .. }
            | Request::BackendAdd { .. }
            | Request::BackendRemove { .. }
            | Request::BackendSet { .. }
            | Request::EndpointAdd { .. }
            | Request::EndpointRemove { .. }
            | Request::EndpointSet { .. }) => self.edit_request(r),
            Request::HealthShow => self.health_show(),
            Request::Flows { op, filter } => self.flows(op, &filter),
            Request::Explain { client, client_port, vip, quic_dcid } => self.explain(client, client_port, vip.as_deref(), quic_dcid.as_deref()),
            Request::SnapshotShow => self.snapshot_show(),
            Request::VipShow => Response::Vips(self.fleet.vips_at(self.shared.generation.load(std::sync::atomic::Ordering::Acquire), std::time::Duration::from_secs(1))),
            Request::VipDrain { vip } => crate::announce::drain_request(self, vip, true).map_or_else(|message| Response::Error { message }, Response::Vips),
            Request::VipUndrain { vip } => crate::announce::drain_request(self, vip, false).map_or_else(|message| Response::Error { message }, Response::Vips),
            Request::DryRun(inner) => self.dry_run(*inner),
            Request::CaptureStart(f) => self.capture_start(&f),
            Request::CapturePoll { session } => self.capture_poll(session, false),
            Request::CaptureStop { session } => self.capture_poll(session, true),
        }
    }
}
