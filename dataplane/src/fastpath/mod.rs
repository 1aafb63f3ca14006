//! The packet path that runs on worker lcores: the poll loop ([`worker`]), the per-worker
//! connection table ([`conntrack`]), the [`port::Port`] trait the loop runs over, and
//! per-worker counters ([`stats`]).
//!
//! May use: [`crate::wire`] (parse and rewrite) and [`crate::control::snapshot`] (read
//! only). Never: locks, allocation, syscalls or panics per packet; nothing from `dpdk`
//! (the DPDK port implements [`port::Port`] from the other side).

pub mod capture;
pub mod conntrack;
pub mod port;
pub mod segments;
pub mod stats;
pub mod sync_queues;
pub mod worker;
pub mod frag;
pub mod neighbor_queues;

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tests_v6;
#[cfg(test)]
mod tests_quic;
#[cfg(test)]
mod tests_l2;
#[cfg(test)]
mod tests_redirect;
