//! Safe layer over DPDK (`dpdk-sys`), in the style of capsule: every null pointer or negative
//! return of a DPDK call becomes a [`DpdkError`] naming the call and carrying DPDK's error
//! text (`rte_strerror`).
//!
//! Objects and their order:
//! - [`Eal`] — the environment abstraction layer; starts **once per process**.
//! - [`Mempool`] — an mbuf pool; create it after [`Eal::init`], drop it after every
//!   [`Mbuf`] taken from it and every [`EthPort`] whose RX queues use it.
//! - [`EthPort`] — an ethdev port found by device name; configure, start, read stats.
//! - [`DpdkQueue`] — one RX + one TX queue of a started port, implementing
//!   [`crate::fastpath::port::Port`] for a worker.
//! - [`Mbuf`] — an owned packet buffer implementing [`crate::fastpath::port::PacketBuf`].
//!
//! Drop order matters because DPDK objects live in EAL memory: mbufs → ports → mempools →
//! `Eal` (whose `Drop` calls `rte_eal_cleanup`).
//!
//! A jumbo frame may arrive in chained mbufs when the port's MTU needs RX scatter
//! ([`RxPlan`]): `data()` is the first segment, `pkt_len()` the whole
//! packet, and the worker pulls headers up into the first segment
//! ([`crate::fastpath::segments`]).

//!
//! Files: [`error`] (the error type), [`eal`], [`mempool`], [`mbuf`], [`ethdev`] (ports and
//! queues), [`iface`] (kernel interfaces devices name, checked before EAL), [`rxplan`] (how a port receives frames of its MTU), [`rss`] (a started port's RSS key, table and hash functions). This folder is the only unsafe code outside `dataplane/dpdk-sys` (besides the
//! connection table's aligned allocation in `fastpath`); every `unsafe` block has a
//! `// SAFETY:` comment.

mod eal;
mod error;
mod ethdev;
mod iface;
mod mbuf;
mod mempool;
mod port_ctl;
mod rss;
mod rxplan;

pub use eal::*;
pub use error::{rte_errno, strerror, DpdkError, Result};
pub use ethdev::*;
pub use iface::*;
pub use mbuf::*;
pub use mempool::*;
pub use port_ctl::*;
pub use rss::*;
pub use rxplan::*;
