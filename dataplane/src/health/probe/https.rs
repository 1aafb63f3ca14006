//! `type = "https"`: the `type = "http"` request and rules over TLS (rustls, `ring`
//! provider). Like cloud load balancers' checks, the certificate is not verified by
//! default; `verify = true` verifies the chain against the system's root certificates
//! (`rustls-native-certs`, loaded once) and the name (`sni`, else the probe IP). `sni`
//! is sent as the TLS server name; without it no SNI is sent (an IP is never sent as SNI).

use super::http;
use super::{connect_done, connect_tcp, shown, Step};
use crate::health::Target;
use mio::net::TcpStream;
use mio::{Registry, Token};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme};
use spillway_shared::config::HEALTH_MAX_BODY;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::sync::Arc;

/// The two TLS client configs of a checker, built on first use: one that accepts any
/// certificate, one that verifies against the system roots.
#[derive(Debug, Default)]
pub struct TlsConfigs {
    insecure: Option<Result<Arc<ClientConfig>, String>>,
    verified: Option<Result<Arc<ClientConfig>, String>>,
}

impl TlsConfigs {
    fn get(&mut self, verify: bool) -> Result<Arc<ClientConfig>, String> {
        let slot = if verify { &mut self.verified } else { &mut self.insecure };
        slot.get_or_insert_with(|| build(verify)).clone()
    }
}

fn build(verify: bool) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let config = if verify {
        let found = rustls_native_certs::load_native_certs();
        let mut roots = RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(found.certs);
        tracing::info!(added, ignored, errors = found.errors.len(), "health: system root certificates loaded for verify = true");
        if added == 0 {
            return Err("verify = true but no system root certificate could be loaded".into());
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider))).with_no_client_auth()
    };
    Ok(Arc::new(config))
}

/// Accepts any certificate chain and name, but still checks the handshake signatures
/// (the backend must hold the key of the certificate it shows).
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Request, rules and TLS setup of an HTTPS check.
#[derive(Debug)]
pub struct Plan {
    http: http::Plan,
    tls: Result<(Arc<ClientConfig>, ServerName<'static>), String>,
}

impl Plan {
    /// The plan of `target` (`Host` defaults leave out port 443).
    pub fn new(target: &Target, tls: &mut TlsConfigs) -> Plan {
        let name = match &target.check.sni {
            Some(sni) => ServerName::try_from(sni.clone()).map_err(|e| format!("sni {sni:?}: {e}")),
            None => Ok(ServerName::IpAddress(target.addr.ip().into())),
        };
        let tls = name.and_then(|n| Ok((tls.get(target.check.verify)?, n)));
        Plan { http: http::Plan::new(target, 443), tls }
    }
}

/// One HTTPS probe in flight.
pub struct Probe {
    stream: TcpStream,
    conn: ClientConnection,
    connected: bool,
    got: Vec<u8>,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("https::Probe").field("connected", &self.connected).field("got", &self.got.len()).finish()
    }
}

impl Probe {
    /// Starts the non-blocking connect; the request is queued in the TLS session and
    /// goes out once the handshake is done.
    pub fn start(plan: &Plan, addr: SocketAddr, registry: &Registry, token: Token) -> io::Result<Probe> {
        let (config, name) = plan.tls.clone().map_err(io::Error::other)?;
        let mut conn = ClientConnection::new(config, name).map_err(|e| io::Error::other(format!("TLS setup: {e}")))?;
        io::Write::write_all(&mut conn.writer(), &plan.http.request)?;
        Ok(Probe { stream: connect_tcp(addr, registry, token)?, conn, connected: false, got: Vec::new() })
    }

    /// What the probe waits for (see [`super::Probe::stage`]).
    pub fn stage(&self) -> String {
        if !self.connected {
            "connecting".into()
        } else if self.conn.is_handshaking() {
            "TLS handshake".into()
        } else {
            super::reading_stage(self.got.len())
        }
    }

    /// Advances on readiness.
    pub fn ready(&mut self, plan: &Plan) -> Step {
        match self.advance(plan) {
            Ok(Some(r)) => Step::Done(r),
            Ok(None) => Step::Pending,
            Err(reason) => Step::Done(Err(reason)),
        }
    }

    fn advance(&mut self, plan: &Plan) -> Result<Option<Result<(), String>>, String> {
        if !self.connected {
            if !connect_done(&self.stream)? {
                return Ok(None);
            }
            self.connected = true;
        }
        loop {
            while self.conn.wants_write() {
                match self.conn.write_tls(&mut self.stream) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if super::would_block(&e) => break,
                    Err(e) => return Err(format!("send: {e}")),
                }
            }
            let (progress, tcp_eof) = match self.conn.read_tls(&mut self.stream) {
                Ok(0) => (false, true),
                Ok(_) => (true, false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => (true, false),
                Err(e) if super::would_block(&e) => (false, false),
                Err(e) => return Err(format!("recv: {e}")),
            };
            if progress {
                if let Err(e) = self.conn.process_new_packets() {
                    // Best effort: tell the backend why (alert), then fail with the reason.
                    let _ = self.conn.write_tls(&mut self.stream);
                    return Err(format!("TLS: {e}"));
                }
            }
            if tcp_eof && self.conn.is_handshaking() {
                return Err("TLS: connection closed by the backend during the handshake".into());
            }
            let mut closed = tcp_eof;
            let mut b = [0u8; 4096];
            while self.got.len() < HEALTH_MAX_BODY {
                let want = (HEALTH_MAX_BODY - self.got.len()).min(b.len());
                match self.conn.reader().read(&mut b[..want]) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(n) => self.got.extend_from_slice(&b[..n]),
                    Err(e) if super::would_block(&e) => break,
                    // Closed without close_notify: what HTTP/1.0 servers often do.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        closed = true;
                        break;
                    }
                    Err(e) => return Err(format!("TLS read: {e} ({:?})", shown(&self.got))),
                }
            }
            if !self.conn.is_handshaking() || closed {
                if let Some(r) = plan.http.evaluate(&self.got, closed) {
                    return Ok(Some(r));
                }
            }
            if closed {
                return Err("connection closed".into());
            }
            if !progress && !self.conn.wants_write() {
                return Ok(None);
            }
        }
    }
}
