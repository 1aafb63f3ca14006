//! [`Eal`], the environment abstraction layer (once per process), and the per-thread
//! helpers: lcore registration, work on EAL's own lcores, socket choice, device names.

use super::error::*;
use dpdk_sys as sys;
use std::ffi::{c_char, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set while an [`Eal`] exists or after it was cleaned up (EAL cannot restart).
static EAL_STARTED: AtomicBool = AtomicBool::new(false);

/// Program name put in front of the EAL arguments (`argv[0]`).
pub const PROGRAM_NAME: &str = "spillway";

/// The initialised DPDK environment. Dropping it calls `rte_eal_cleanup`.
#[derive(Debug)]
pub struct Eal {
    cleaned: bool,
}

impl Eal {
    /// Initialises EAL with `args` (without program name, e.g.
    /// `["--no-huge", "--no-shconf", "-m", "512", "--no-pci", "--vdev=net_null0"]`).
    ///
    /// Fails with a hint for common causes (no hugepages, bad arguments, second init).
    /// EAL can be initialised only once per process; a failed argument parse may be retried.
    pub fn init(args: &[String]) -> Result<Eal> {
        if EAL_STARTED.swap(true, Ordering::SeqCst) {
            return Err(DpdkError {
                call: "rte_eal_init",
                errno: libc::EALREADY,
                message: "EAL is already initialised in this process".into(),
                hint: Some(
                    "EAL can start only once per process: share one Eal, or run DPDK tests \
                     in separate processes"
                        .into(),
                ),
            });
        }
        let argv = match build_argv(args) {
            Ok(a) => a,
            Err(e) => {
                EAL_STARTED.store(false, Ordering::SeqCst);
                return Err(e);
            }
        };
        // EAL may keep pointers into argv (and permutes the array), so the strings live for
        // the rest of the process.
        let strings: &'static mut [CString] = Box::leak(argv.into_boxed_slice());
        let mut ptrs: Vec<*mut c_char> = strings
            .iter_mut()
            .map(|s| s.as_ptr() as *mut c_char)
            .collect();
        ptrs.push(ptr::null_mut());
        let ptrs: &'static mut [*mut c_char] = Box::leak(ptrs.into_boxed_slice());
        let argc = (ptrs.len() - 1) as i32;
        // SAFETY: argv is a NULL-terminated array of `argc` valid, NUL-terminated, leaked
        // (hence 'static) strings; EAL may reorder the array, which we never read again.
        let ret = unsafe { sys::rte_eal_init(argc, ptrs.as_mut_ptr()) };
        if ret < 0 {
            let errno = rte_errno();
            // DPDK clears its own run-once flag on argument errors, so allow a retry; any
            // other failure makes DPDK itself answer EALREADY next time.
            EAL_STARTED.store(false, Ordering::SeqCst);
            let mut e = DpdkError::new("rte_eal_init", errno, format!("EAL args {args:?}"));
            e.hint = eal_hint(errno, args);
            return Err(e);
        }
        Ok(Eal { cleaned: false })
    }

    /// Number of ethdev ports EAL probed (`rte_eth_dev_count_avail`).
    pub fn port_count(&self) -> u16 {
        // SAFETY: EAL is initialised (self exists); pure query.
        unsafe { sys::rte_eth_dev_count_avail() }
    }

    /// Names of all probed ports, by port id.
    pub fn port_names(&self) -> Vec<(u16, String)> {
        port_names()
    }

    /// Number of EAL lcores (`rte_lcore_count`).
    pub fn lcore_count(&self) -> u32 {
        // SAFETY: EAL is initialised; pure query.
        unsafe { sys::rte_lcore_count() }
    }

    /// The first `n` EAL worker lcores ([`worker_lcores`]), one per worker;
    /// `Err(available)` when EAL has fewer.
    pub fn worker_lcores(&self, n: usize) -> std::result::Result<Vec<u32>, usize> {
        let mut l = worker_lcores();
        if l.len() < n {
            return Err(l.len());
        }
        l.truncate(n);
        Ok(l)
    }

    /// Initialises DPDK's packet capture framework (`rte_pdump_init`): registers the
    /// multi-process request handler through which `dpdk-dumpcap` (a secondary process)
    /// asks this primary to copy a port's RX/TX packets to it. Nothing runs on the packet
    /// path until a capture is enabled: `rte_pdump` then installs ethdev RX/TX callbacks on
    /// the captured queues, and removes them when it ends. Errors: EAL runs without
    /// multi-process (`--no-shconf`, `--in-memory`) or the handler cannot register.
    pub fn pdump_init(&self) -> Result<()> {
        // SAFETY: EAL is initialised (this object exists); called once, from the main
        // thread, before the workers start.
        let ret = unsafe { sys::rte_pdump_init() };
        check("rte_pdump_init", ret, || "dataplane.packet_capture".to_string()).map(|_| ())
    }

    /// Releases EAL resources (`rte_eal_cleanup`) now, reporting failure. Drop every mbuf,
    /// port and mempool first. EAL cannot be initialised again in this process.
    pub fn cleanup(mut self) -> Result<()> {
        self.cleaned = true;
        // SAFETY: EAL was initialised by this object, which is consumed; the caller dropped
        // the DPDK objects that live in EAL memory.
        let ret = unsafe { sys::rte_eal_cleanup() };
        check("rte_eal_cleanup", ret, String::new).map(|_| ())
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        if !self.cleaned {
            self.cleaned = true;
            // SAFETY: as in `cleanup`; errors are ignored in drop.
            unsafe {
                sys::rte_eal_cleanup();
            }
        }
    }
}

/// `argv` for `rte_eal_init`: the program name, then `args`.
fn build_argv(args: &[String]) -> Result<Vec<CString>> {
    std::iter::once(PROGRAM_NAME)
        .chain(args.iter().map(String::as_str))
        .map(|a| {
            CString::new(a).map_err(|_| DpdkError {
                call: "rte_eal_init",
                errno: libc::EINVAL,
                message: format!("EAL argument {a:?} contains a NUL byte"),
                hint: None,
            })
        })
        .collect()
}

/// A hint for an `rte_eal_init` failure with `errno` and `args`.
fn eal_hint(errno: i32, args: &[String]) -> Option<String> {
    let no_huge = args.iter().any(|a| a == "--no-huge");
    match errno {
        libc::EACCES | libc::ENOMEM if !no_huge => Some(
            "no hugepages (or no permission to them)? try --no-huge -m 512 for tests, or \
             reserve hugepages with dpdk-hugepages.py and run as root"
                .into(),
        ),
        libc::ENOMEM => Some("not enough memory: raise -m (e.g. -m 512)".into()),
        libc::EINVAL => Some(
            "invalid EAL arguments: check the option spelling and --vdev strings \
             (e.g. --vdev=net_pcap0,rx_pcap=in.pcap); see `dpdk-testpmd --help`"
                .into(),
        ),
        libc::EALREADY => Some("EAL can start only once per process".into()),
        libc::ENODEV => Some(
            "no devices: add --vdev=net_null0 for a virtual port, or bind a NIC with \
             dpdk-devbind.py --bind=vfio-pci"
                .into(),
        ),
        libc::ENOTSUP | libc::EPROTO => Some(
            "a driver or bus failed to probe: check --vdev arguments and the driver \
             directory (RTE_EAL_PMD_PATH)"
                .into(),
        ),
        _ => None,
    }
}

/// The device name of a `--vdev` string: the part before the first comma
/// (`net_pcap0,rx_pcap=x.pcap` → `net_pcap0`).
pub fn vdev_device_name(vdev: &str) -> &str {
    vdev.split(',').next().unwrap_or(vdev).trim()
}

/// Names of all probed ports, by port id. Walks the ports in use (`rte_eth_find_next`):
/// asking for the name of an unused id would log `Invalid port_id=N` for each.
pub fn port_names() -> Vec<(u16, String)> {
    let mut out = Vec::new();
    let max = sys::RTE_MAX_ETHPORTS as u16;
    // SAFETY: pure query of the port table (EAL is initialised by the callers).
    let mut id = unsafe { sys::rte_eth_find_next(0) };
    while id < max {
        let mut buf = [0 as c_char; 64];
        // SAFETY: buf is 64 bytes ≥ RTE_ETH_NAME_MAX_LEN; DPDK writes a NUL-terminated
        // name on success; `id` is a port in use.
        let ret = unsafe { sys::rte_eth_dev_get_name_by_port(id, buf.as_mut_ptr()) };
        if ret == 0 {
            // SAFETY: NUL-terminated by DPDK on success.
            let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
            out.push((id, name.to_string_lossy().into_owned()));
        }
        // SAFETY: as above; returns RTE_MAX_ETHPORTS after the last port in use.
        id = unsafe { sys::rte_eth_find_next(id + 1) };
    }
    out
}

/// Registers the calling non-EAL thread with EAL (`rte_thread_register`) so it gets an lcore
/// id (per-lcore mempool caches, `rte_errno` and `rte_lcore_id()` work). Returns the lcore
/// id; on an EAL thread (or one already registered) returns its id unchanged. Registering
/// disables EAL multi-process for the rest of the process (`rte_mp_disable`: no secondary,
/// `dpdk-dumpcap` included, can attach afterwards): where one must, run the work on an
/// EAL lcore with [`spawn_on_lcore`] instead.
pub fn register_thread() -> Result<u32> {
    let id = lcore_id();
    if id != sys::LCORE_ID_ANY {
        return Ok(id);
    }
    // SAFETY: EAL must be initialised; rte_thread_register returns -1 with rte_errno set
    // (e.g. ENOMEM when all RTE_MAX_LCORE ids are taken) otherwise.
    let ret = unsafe { sys::rte_thread_register() };
    if ret < 0 {
        return Err(
            DpdkError::from_rte_errno("rte_thread_register", "").with_hint(
                "EAL must be initialised and a free lcore id must remain (RTE_MAX_LCORE); \
             EAL's own lcores count against it",
            ),
        );
    }
    Ok(lcore_id())
}

/// The EAL worker lcores (every enabled lcore but the main one), in id order
/// (`rte_get_next_lcore` with `skip_main`). They exist only for the lcores named by
/// `-l`/`--lcores` at [`Eal::init`]; each is an EAL thread pinned to its CPU set and idle
/// (blocked on its command pipe) until [`spawn_on_lcore`] gives it work.
pub fn worker_lcores() -> Vec<u32> {
    let mut out = Vec::new();
    let mut id = u32::MAX; // rte_get_next_lcore(-1, ...) starts at lcore 0
    loop {
        // SAFETY: pure query of EAL's lcore table; EAL must be initialised (the caller
        // holds an `Eal`), and an `i` ≥ RTE_MAX_LCORE answer ends the walk.
        id = unsafe { sys::rte_get_next_lcore(id, 1, 0) };
        if id >= sys::RTE_MAX_LCORE {
            return out;
        }
        out.push(id);
    }
}

/// EAL's lcore option that gives each worker an EAL lcore pinned to its CPU:
/// `--lcores=0@M,1@C0,2@C1,...` (main lcore 0 on CPU `main_cpu`, lcore w+1 on
/// `worker_cpus[w]`; EAL's `--lcores` syntax `LCORE@CPU`), for [`spawn_on_lcore`].
/// A worker CPU outside `allowed` (the process's CPU set; empty: unknown) would make EAL
/// refuse to start, so that worker's lcore goes on `main_cpu` with a warning, as a worker
/// thread that cannot be pinned runs unpinned.
pub fn worker_lcores_arg(main_cpu: usize, worker_cpus: &[usize], allowed: &[usize]) -> String {
    let mut a = format!("--lcores=0@{main_cpu}");
    for (w, &c) in worker_cpus.iter().enumerate() {
        let c = if allowed.is_empty() || allowed.contains(&c) {
            c
        } else {
            tracing::warn!(worker = w, cpu = c, main_cpu, "dataplane.worker_cores names a CPU outside this process's CPU set (CPUAffinity, cpuset): this worker's lcore runs on the main lcore's CPU");
            main_cpu
        };
        a.push_str(&format!(",{}@{c}", w + 1));
    }
    a
}

/// The main lcore's id (`rte_get_main_lcore`): the thread that called [`Eal::init`].
pub fn main_lcore() -> u32 {
    // SAFETY: pure query; valid once EAL is initialised.
    unsafe { sys::rte_get_main_lcore() }
}

/// What an lcore job sends back when it ends: its closure's panic payload, if it panicked.
type LcoreOutcome = std::thread::Result<()>;

/// The job [`spawn_on_lcore`] hands to an EAL lcore: the closure and the channel on which
/// the lcore reports that the closure is over.
struct LcoreJob<'a> {
    /// The lcore thread's name while the job runs (≤ 15 bytes, as Linux keeps).
    name: CString,
    f: Box<dyn FnOnce() + Send + 'a>,
    done: std::sync::mpsc::SyncSender<LcoreOutcome>,
}

/// The function EAL runs on the lcore (`lcore_function_t`).
unsafe extern "C" fn lcore_trampoline(arg: *mut std::ffi::c_void) -> i32 {
    // SAFETY: `arg` is the `Box<LcoreJob>` leaked by `spawn_on_lcore` for exactly this one
    // launch; ownership comes back here once.
    let job = unsafe { Box::from_raw(arg.cast::<LcoreJob<'_>>()) };
    let LcoreJob { name, f, done } = *job;
    // SAFETY: names the calling thread; `name` is NUL-terminated and at most 15 bytes.
    unsafe { libc::pthread_setname_np(libc::pthread_self(), name.as_ptr()) };
    // A panic must not unwind into EAL's C frames: catch it and hand it to the waiter.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    // The closure and everything it borrowed are gone before the waiter hears of it, so
    // the scope may end (and free what was borrowed) as soon as this is received.
    let _ = done.send(outcome);
    0
}

/// Runs `f` on the EAL worker lcore `lcore` (`rte_eal_remote_launch`), inside `scope`:
/// like [`std::thread::Scope::spawn`], but on one of EAL's own pinned lcore threads, so
/// the thread has its lcore id (per-lcore mempool cache, `rte_lcore_id()`) without
/// `rte_thread_register`, which would disable multi-process for the whole process
/// (`rte_mp_disable`) and make the primary refuse every secondary, `dpdk-dumpcap`
/// included.
///
/// The lcore thread takes `name` while `f` runs (e.g. `worker-0`, as `top -H` and the
/// benchmarks see it; at most 15 bytes are kept). Returns the handle of a scoped waiter
/// thread (`wait-NAME`) that blocks (no spinning) until `f` has returned on the lcore and
/// EAL marked the lcore idle, then ends, re-raising `f`'s panic if it panicked; the scope
/// joins it, so `f` may borrow anything that outlives the scope, and once the scope ends
/// the lcore takes new work. Must be called from the
/// main lcore (the thread that ran [`Eal::init`]), as DPDK requires of remote launches.
/// Errors: `lcore` is not an idle worker lcore (`rte_eal_remote_launch` answers `-EBUSY`,
/// or `-EINVAL` for the main lcore or an unknown id), or the waiter thread cannot start.
pub fn spawn_on_lcore<'scope, 'env, F>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    lcore: u32,
    name: String,
    f: F,
) -> Result<std::thread::ScopedJoinHandle<'scope, ()>>
where
    F: FnOnce() + Send + 'scope,
{
    if lcore_id() != main_lcore() {
        return Err(DpdkError::new(
            "rte_eal_remote_launch",
            libc::EPERM,
            format!("lcore {lcore}: launches must come from the main lcore"),
        ));
    }
    let (done, finished) = std::sync::mpsc::sync_channel::<LcoreOutcome>(1);
    // The waiter starts first: once the job is launched nothing may fail any more, since
    // the lcore must be waited for before the scope ends.
    let mut short = name.clone();
    while short.len() > 15 {
        short.pop();
    }
    let short = CString::new(short).unwrap_or_default();
    let waiter = std::thread::Builder::new()
        .name(format!("wait-{name}"))
        .spawn_scoped(scope, move || {
            let outcome = match finished.recv() {
                Ok(o) => o,
                Err(_) => return, // never launched: the job, with its sender, was dropped
            };
            // The trampoline is returning to EAL, which then marks the lcore idle: wait
            // for that (microseconds), so that once the scope ends the lcore takes work.
            // SAFETY: reads the lcore's state; `lcore` is a valid, launched lcore id.
            while unsafe { sys::rte_eal_get_lcore_state(lcore) } != sys::rte_lcore_state_t_WAIT {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
            if let Err(panic) = outcome {
                std::panic::resume_unwind(panic);
            }
        })
        .map_err(|e| {
            DpdkError::new("rte_eal_remote_launch", libc::EAGAIN, format!("lcore {lcore}: waiter thread: {e}"))
        })?;
    let job: Box<LcoreJob<'scope>> = Box::new(LcoreJob { name: short, f: Box::new(f), done });
    let arg = Box::into_raw(job).cast::<std::ffi::c_void>();
    // SAFETY: the trampoline matches `lcore_function_t`; on success EAL calls it once with
    // `arg` on the lcore, and it takes the box back; `arg`'s borrows outlive the scope,
    // whose end waits for the waiter, which waits for the trampoline's report. Called on
    // the main lcore (checked above).
    let ret = unsafe { sys::rte_eal_remote_launch(Some(lcore_trampoline), arg, lcore) };
    if ret < 0 {
        // SAFETY: EAL refused the launch, so it never saw `arg`: the box is still ours.
        // Dropping it drops the sender, which ends the waiter.
        drop(unsafe { Box::from_raw(arg.cast::<LcoreJob<'scope>>()) });
        let mut e = DpdkError::new("rte_eal_remote_launch", -ret, format!("lcore {lcore}"));
        e.hint = Some(
            "workers run on EAL worker lcores: give EAL one lcore per worker besides the \
             main one (-l/--lcores in dataplane.eal_args)"
                .into(),
        );
        return Err(e);
    }
    Ok(waiter)
}

/// Waits until every EAL worker lcore is idle again (`rte_eal_mp_wait_lcore`). Call on
/// the main lcore after the jobs of [`spawn_on_lcore`] have been joined: it then returns
/// at once (it spins while a job runs).
pub fn wait_lcores() {
    if lcore_id() == main_lcore() {
        // SAFETY: called on the main lcore, as DPDK requires.
        unsafe { sys::rte_eal_mp_wait_lcore() }
    }
}

/// Releases the lcore id taken by [`register_thread`] (`rte_thread_unregister`).
pub fn unregister_thread() {
    // SAFETY: a no-op for threads that did not register.
    unsafe { sys::rte_thread_unregister() }
}

/// The calling thread's lcore id (`rte_lcore_id()`), `LCORE_ID_ANY` (u32::MAX) for
/// unregistered threads.
pub fn lcore_id() -> u32 {
    // SAFETY: reads a thread-local; valid on any thread.
    unsafe { sys::spw_lcore_id() }
}

/// The calling thread's NUMA socket (`rte_socket_id`), `None` when unknown.
pub fn current_socket() -> Option<u32> {
    // SAFETY: reads a thread-local; valid on any thread.
    let s = unsafe { sys::rte_socket_id() };
    (s as i32 != sys::SOCKET_ID_ANY).then_some(s)
}

/// Chooses a concrete socket: `requested` if ≥ 0, else the caller's socket, else 0.
pub fn pick_socket(requested: i32, current: Option<u32>) -> i32 {
    if requested >= 0 {
        requested
    } else {
        current.map(|s| s as i32).filter(|s| *s >= 0).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vdev_names() {
        assert_eq!(
            vdev_device_name("net_pcap0,rx_pcap=a.pcap,infinite_rx=1"),
            "net_pcap0"
        );
        assert_eq!(vdev_device_name("net_null0"), "net_null0");
        assert_eq!(vdev_device_name("0000:03:00.0"), "0000:03:00.0");
    }

    #[test]
    fn socket_fallback() {
        assert_eq!(pick_socket(1, Some(0)), 1);
        assert_eq!(pick_socket(-1, Some(2)), 2);
        assert_eq!(pick_socket(-1, None), 0);
    }

    #[test]
    fn lcores_arg() {
        assert_eq!(worker_lcores_arg(0, &[1, 0], &[]), "--lcores=0@0,1@1,2@0");
        assert_eq!(worker_lcores_arg(3, &[], &[0, 3]), "--lcores=0@3");
        assert_eq!(worker_lcores_arg(0, &[1, 7], &[0, 1]), "--lcores=0@0,1@1,2@0", "CPU 7 is not usable: on the main CPU");
    }

    #[test]
    fn argv_and_hints() {
        let a = build_argv(&["--no-huge".into()]).unwrap();
        assert_eq!(a[0].to_str().unwrap(), PROGRAM_NAME);
        assert!(build_argv(&["a\0b".into()]).is_err());
        assert!(eal_hint(libc::EACCES, &[])
            .unwrap()
            .contains("--no-huge -m 512"));
        assert!(eal_hint(libc::EINVAL, &[]).is_some());
    }
}
