//! The NCCL backend against the real `libnccl.so.2` on a machine without a GPU: loading, version,
//! unique ids handed to several real processes through a file store, and the errors for a missing GPU, a missing
//! library and a library without NCCL's symbols; encryption refused on NVIDIA's TLS-less build;
//! the library's symbols resolved through the global scope (`MCORE_NCCL_GLOBAL_SYMBOLS`).
//!
//! The library comes from `MCORE_NCCL_LIBRARY` or the usual search (scripts/test.d/30-nccl-cpu.sh
//! installs the `nvidia-nccl-cu12` wheel and points at it). Without it the tests that need it say
//! why and pass, unless `MCORE_NCCL_TEST_REQUIRE=1` (set by that script in CI), where they fail.

use mcore_init::backend::nccl::{
    share_unique_id, Device, LibrarySearch, NcclComm, NcclConfig, NcclError, NcclLibrary, NcclUniqueId, UNIQUE_ID_KEY,
};
use mcore_init::store::{FileStore, MemoryStore, Store};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "MCORE_NCCL_TEST_CHILD";
const CHILD_TIMEOUT: Duration = Duration::from_secs(60);

fn library() -> Option<&'static NcclLibrary> {
    match NcclLibrary::global() {
        Ok(lib) => Some(lib),
        Err(e) if std::env::var("MCORE_NCCL_TEST_REQUIRE").as_deref() == Ok("1") => {
            panic!("the NCCL library is required here but could not be loaded: {e}")
        }
        Err(e) => {
            eprintln!("SKIP (no NCCL library): {e}");
            None
        }
    }
}

/// Wait for `child` until `deadline`; whether it exited by then.
fn exited_by(child: &mut std::process::Child, deadline: Instant) -> bool {
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn real_library_reports_a_2_18_or_newer_version() {
    let Some(lib) = library() else { return };
    let v = lib.version();
    eprintln!("loaded NCCL {v} from {}", lib.path());
    assert_eq!(v.major, 2, "NCCL {v}");
    assert!(v.minor >= 18, "NCCL {v} is older than 2.18 (ncclCommSplit)");
    lib.require(mcore_init::backend::nccl::Feature::CommSplit).unwrap();
    lib.require(mcore_init::backend::nccl::Feature::CommInitRankConfig).unwrap();
    // The global handle is loaded once.
    assert!(std::ptr::eq(lib, NcclLibrary::global().unwrap()));
}

/// Recovery shrinks the world with `ncclCommShrink` (docs/recovery.md): the real library exports
/// it from 2.27 on (the wheel is newer), and the loader resolves it; an older one is named too old.
#[test]
fn real_library_resolves_nccl_comm_shrink_from_2_27() {
    use mcore_init::backend::nccl::{Feature, NcclVersion};
    let Some(lib) = library() else { return };
    let v = lib.version();
    if v >= NcclVersion::new(2, 27, 0) {
        lib.require(Feature::CommShrink).unwrap_or_else(|e| panic!("NCCL {v} at {}: {e}", lib.path()));
    } else {
        let e = lib.require(Feature::CommShrink).unwrap_err();
        assert!(matches!(e, NcclError::VersionTooOld { .. }), "{e}");
    }
    // The CI wheel is newer than 2.27: there the symbol must resolve.
    if std::env::var("MCORE_NCCL_TEST_REQUIRE").as_deref() == Ok("1") {
        assert!(v >= NcclVersion::new(2, 27, 0), "the test wheel's NCCL {v} predates ncclCommShrink");
    }
}

#[test]
fn unique_ids_are_128_bytes_and_distinct() {
    let Some(lib) = library() else { return };
    let a = lib.unique_id().unwrap();
    let b = lib.unique_id().unwrap();
    assert_eq!(a.to_bytes().len(), 128);
    assert_ne!(a, b, "two ncclGetUniqueId calls returned the same id");
    assert!(a.to_bytes().iter().any(|&x| x != 0), "id is all zeros");
    assert_eq!(NcclUniqueId::from_bytes(&a.to_bytes()).unwrap(), a);
}

/// Run by `unique_id_reaches_every_process` in a child process: read the group's id from the
/// file store in `MCORE_NCCL_TEST_STORE` and print it.
#[test]
#[ignore = "child half of unique_id_reaches_every_process"]
fn unique_id_child() {
    std::env::var(CHILD_ENV).expect("run only as a child of unique_id_reaches_every_process");
    let store = FileStore::new(std::env::var("MCORE_NCCL_TEST_STORE").unwrap(), CHILD_TIMEOUT).unwrap();
    let lib = NcclLibrary::global().unwrap();
    let id = share_unique_id(lib, &store, UNIQUE_ID_KEY, false, "data_parallel/0", CHILD_TIMEOUT).unwrap();
    println!("CHILD pid={} nccl={} ID {}", std::process::id(), lib.version(), hex(id.as_bytes()));
}

#[test]
fn unique_id_reaches_every_process() {
    let Some(lib) = library() else { return };
    let dir = std::env::temp_dir().join(format!("mcore-nccl-id-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = FileStore::new(&dir, CHILD_TIMEOUT).unwrap();
    let exe = std::env::current_exe().unwrap();
    // The members start first and wait for the key; the root publishes afterwards.
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    &crate::common::test_name(module_path!(), "unique_id_child"),
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, "1")
                .env("MCORE_NCCL_TEST_STORE", &dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    let id = share_unique_id(lib, &store, UNIQUE_ID_KEY, true, "data_parallel/0", CHILD_TIMEOUT).unwrap();
    let start = Instant::now();
    let mut pids = Vec::new();
    for mut child in children {
        if !exited_by(&mut child, start + CHILD_TIMEOUT) {
            let _ = child.kill();
            panic!("a child did not finish within {CHILD_TIMEOUT:?}");
        }
        let mut out = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        assert!(child.wait().unwrap().success(), "child failed: {out}");
        // libtest prints "test unique_id_child ... " before the child's own line.
        let line = out
            .lines()
            .find_map(|l| l.find("CHILD pid=").map(|at| &l[at..]))
            .unwrap_or_else(|| panic!("no CHILD line in {out}"));
        let got = line.rsplit("ID ").next().unwrap();
        assert_eq!(got, hex(id.as_bytes()), "a child received different bytes");
        pids.push(line.split_whitespace().nth(1).unwrap().to_string());
    }
    let _ = std::fs::remove_dir_all(&dir);
    pids.sort();
    pids.dedup();
    assert_eq!(pids.len(), 3, "expected three distinct processes: {pids:?}");
}

#[test]
fn a_member_without_a_root_times_out_naming_the_group_and_key() {
    let Some(lib) = library() else { return };
    let store = MemoryStore::new(Duration::from_secs(5));
    let err = share_unique_id(lib, &store, UNIQUE_ID_KEY, false, "expert_data_parallel/2", Duration::from_millis(200))
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("expert_data_parallel/2") && text.contains("'nccl_unique_id'"), "{text}");
    assert_eq!(mcore_init::backend::CommError::from(err).kind, mcore_init::backend::CommErrorKind::Timeout);
    // A value of the wrong size is named, not used.
    store.set(UNIQUE_ID_KEY, b"short").unwrap();
    let text = share_unique_id(lib, &store, UNIQUE_ID_KEY, false, "g", Duration::from_secs(1)).unwrap_err().to_string();
    assert!(text.contains("128 bytes, got 5"), "{text}");
}

fn has_cuda_driver() -> bool {
    mcore_init::backend::nccl::CudaDriver::global().is_ok()
}

#[test]
fn init_on_a_device_without_a_driver_fails_fast_naming_the_driver_and_group() {
    let Some(lib) = library() else { return };
    if has_cuda_driver() {
        eprintln!("SKIP: this machine has a CUDA driver");
        return;
    }
    let id = lib.unique_id().unwrap();
    let start = Instant::now();
    let err = NcclComm::init_rank(
        lib,
        "tensor_model_parallel/0",
        &id,
        1,
        0,
        Device::Ordinal(0),
        &NcclConfig::default(),
        Duration::from_secs(20),
    )
    .unwrap_err();
    let text = err.to_string();
    eprintln!("{text}");
    assert!(matches!(err, NcclError::LibraryNotFound { .. }), "{err:?}");
    assert!(text.contains("libcuda.so.1"), "{text}");
    assert!(text.contains("tensor_model_parallel/0"), "{text}");
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn init_with_no_gpu_returns_nccls_error_within_the_deadline() {
    let Some(lib) = library() else { return };
    if has_cuda_driver() {
        eprintln!("SKIP: this machine has a CUDA driver");
        return;
    }
    let id = lib.unique_id().unwrap();
    let deadline = Duration::from_secs(20);
    let start = Instant::now();
    // Device::Current: NCCL itself finds no device.
    let err = NcclComm::init_rank(lib, "data_parallel/1", &id, 1, 0, Device::Current, &NcclConfig::default(), deadline)
        .unwrap_err();
    let text = err.to_string();
    eprintln!("{text}");
    assert!(start.elapsed() <= deadline + Duration::from_secs(5), "took {:?}", start.elapsed());
    assert!(text.contains("data_parallel/1"), "{text}");
    assert!(matches!(err, NcclError::Call { .. } | NcclError::Timeout { .. }), "{err:?}");
}

#[test]
fn invalid_rank_is_named_before_nccl_is_called() {
    let Some(lib) = library() else { return };
    let id = lib.unique_id().unwrap();
    let err =
        NcclComm::init_rank(lib, "pp/0", &id, 2, 2, Device::Current, &NcclConfig::default(), Duration::from_secs(1))
            .unwrap_err();
    assert!(err.to_string().contains("group pp/0: rank 2 is outside 0..2"), "{err}");
}

#[test]
fn a_missing_library_lists_the_paths_tried() {
    let err = NcclLibrary::load(&LibrarySearch::explicit("/nonexistent/mcore/libnccl.so.2")).err().unwrap();
    let text = err.to_string();
    assert!(matches!(err, NcclError::LibraryNotFound { .. }), "{err:?}");
    assert!(text.contains("/nonexistent/mcore/libnccl.so.2: no such file"), "{text}");
    assert!(text.contains("MCORE_NCCL_LIBRARY"), "{text}");

    let site = std::env::temp_dir().join(format!("mcore-empty-site-{}", std::process::id()));
    let search =
        LibrarySearch::from_lookup(|k| (k == "MCORE_NCCL_PYTHON_SITE").then(|| site.display().to_string()), Vec::new);
    if let Err(err) = NcclLibrary::load(&search) {
        let text = err.to_string();
        assert!(text.contains(&format!("{}/nvidia/nccl/lib/libnccl.so.2: no such file", site.display())), "{text}");
        assert!(text.contains("libnccl.so.2:"), "{text}");
        assert!(text.contains("pip install nvidia-nccl-cu12"), "{text}");
    } // else: libnccl.so.2 is on this machine's loader path.
}

#[test]
fn a_library_without_nccls_symbols_is_named() {
    let err = NcclLibrary::load(&LibrarySearch::explicit("libm.so.6")).err().unwrap();
    let text = err.to_string();
    assert!(matches!(err, NcclError::MissingSymbol { .. }), "{err:?}");
    assert!(text.contains("libm.so.6"), "{text}");
    assert!(text.contains("ncclGetVersion"), "{text}");
}

/// Child of `library_is_found_through_the_python3_on_path` and `..._virtual_env`: load from the
/// environment's search and print the file used.
#[test]
#[ignore = "child half of the search tests"]
fn search_child() {
    std::env::var(CHILD_ENV).expect("run only as a child");
    let lib = NcclLibrary::global().unwrap();
    println!("FOUND {}", lib.path());
}

/// The venv folder holding `MCORE_NCCL_LIBRARY` (`<venv>/lib/python3.X/site-packages/nvidia/nccl/lib/`).
fn wheel_venv() -> Option<std::path::PathBuf> {
    let lib = std::path::PathBuf::from(std::env::var("MCORE_NCCL_LIBRARY").ok()?);
    let venv = lib.ancestors().nth(7)?.to_path_buf();
    venv.join("bin/python3").exists().then_some(venv)
}

fn found_by_search(env: &[(&str, String)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        &crate::common::test_name(module_path!(), "search_child"),
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, "1")
    .env_remove("MCORE_NCCL_LIBRARY")
    .env_remove("VIRTUAL_ENV")
    .env_remove("MCORE_NCCL_PYTHON_SITE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "child failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    text.lines()
        .find_map(|l| l.find("FOUND ").map(|at| l[at + 6..].to_string()))
        .unwrap_or_else(|| panic!("no FOUND in {text}"))
}

#[test]
fn library_is_found_through_the_python3_on_path_and_virtual_env() {
    let Some(venv) = wheel_venv() else {
        eprintln!("SKIP: MCORE_NCCL_LIBRARY does not point into a venv's nvidia/nccl/lib");
        return;
    };
    let want = std::fs::canonicalize(std::env::var("MCORE_NCCL_LIBRARY").unwrap()).unwrap();
    let path = format!("{}:{}", venv.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let via_python = found_by_search(&[("PATH", path)]);
    assert_eq!(std::fs::canonicalize(&via_python).unwrap(), want, "python3 on PATH led to {via_python}");
    let via_venv = found_by_search(&[("VIRTUAL_ENV", venv.display().to_string())]);
    assert_eq!(std::fs::canonicalize(&via_venv).unwrap(), want, "VIRTUAL_ENV led to {via_venv}");
}

#[test]
fn the_runtime_factory_publishes_the_id_then_fails_naming_the_group_without_a_gpu() {
    use mcore_init::backend::nccl::NcclFactory;
    use mcore_init::backend::CommFactory;
    use mcore_init::backend::GroupInfo;
    let Some(lib) = library() else { return };
    if has_cuda_driver() {
        eprintln!("SKIP: this machine has a CUDA driver");
        return;
    }
    let factory = NcclFactory::new(lib, Device::Ordinal(0), NcclConfig::default());
    assert_eq!(factory.name(), "nccl");
    let store = std::sync::Arc::new(MemoryStore::new(Duration::from_secs(5)));
    let g = GroupInfo::new("tensor_model_parallel/1", vec![2, 3], 2, Duration::from_secs(5)).unwrap();
    let err = factory.create_group(&g, &Default::default(), store.clone()).err().expect("no GPU here").to_string();
    assert!(err.contains("tensor_model_parallel/1") && err.contains("libcuda.so.1"), "{err}");
    // As group rank 0 it published the id for the other member before failing.
    assert_eq!(store.get(UNIQUE_ID_KEY).unwrap().len(), 128);
}

#[test]
fn the_factory_offers_split_on_2_18_and_names_bad_per_kind_options() {
    use mcore_init::backend::nccl::NcclFactory;
    use mcore_init::backend::CommFactory;
    use mcore_init::backend::CommOptions;
    let Some(lib) = library() else { return };
    let factory = NcclFactory::new(lib, Device::Ordinal(0), NcclConfig::default());
    // The wheel's NCCL is >= 2.18 (checked above), so ncclCommSplit is there.
    assert_eq!(factory.split_unavailable(), None, "NCCL {}", lib.version());
    let ok = CommOptions {
        cga_cluster_size: Some(4),
        min_ctas: Some(1),
        max_ctas: Some(8),
        net_name: Some("Socket".into()),
        split_share: Some(true),
        ..Default::default()
    };
    assert_eq!(factory.check_options(&ok), Ok(()));
    let bad = CommOptions { cga_cluster_size: Some(9), ..Default::default() };
    let e = factory.check_options(&bad).unwrap_err();
    assert_eq!(e.kind, mcore_init::backend::CommErrorKind::InvalidArgument);
    assert!(e.message.contains("cga_cluster_size 9"), "{e}");
    let e = factory
        .check_options(&CommOptions { min_ctas: Some(16), max_ctas: Some(4), ..Default::default() })
        .unwrap_err();
    assert!(e.message.contains("min_ctas 16 is larger than max_ctas 4"), "{e}");
}

/// `mcore-selftest --backend nccl` as a world of one on this machine (no GPU): its stderr.
fn selftest_nccl(extra: &[&str]) -> (Option<i32>, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcore-selftest"))
        .args(["--backend", "nccl", "--tp", "1", "--timeout", "20"])
        .args(extra)
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    exited_by(&mut child, Instant::now() + CHILD_TIMEOUT);
    let _ = child.kill();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (status.code(), err)
}

#[test]
fn selftest_with_nccl_and_no_gpu_fails_naming_the_communicator_for_each_strategy() {
    if library().is_none() || has_cuda_driver() {
        eprintln!("SKIP: needs the NCCL library and no CUDA driver");
        return;
    }
    // Default (auto) resolves to split: the world communicator is the first one created.
    let (code, err) = selftest_nccl(&[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("group world") && err.contains("libcuda.so.1"), "{err}");
    let (code, err) = selftest_nccl(&["--comm-strategy", "per-group"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("group tensor_model_parallel/0") && err.contains("libcuda.so.1"), "{err}");
}

#[test]
fn selftest_with_nccl_rejects_a_bad_megatron_config_file_before_any_rendezvous() {
    if library().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("mcore-nccl-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("nccl_comm.yaml");
    std::fs::write(&file, "dp:\n  max_ctas: 8\ntp:\n  cga_cluster_size: 9\n").unwrap();
    let (code, err) = selftest_nccl(&["--comm-config", file.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("communicator options of tensor_model_parallel: cga_cluster_size 9 is outside"), "{err}");
    // A file the tool cannot read is a usage error (exit 2) naming the file and the option.
    std::fs::write(&file, "tp:\n  max_cta: 8\n").unwrap();
    let (code, err) = selftest_nccl(&["--comm-config", file.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("unknown option 'max_cta'") && err.contains("nccl_comm.yaml"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 36: NVIDIA's PyPI build of 2.32.3 has no TLS (`ncclSetEncryption` would accept a key and
/// every connection then fail). The real library is recognised from its file before anything is
/// handed to NCCL, and the error names the fix; a key shorter than 32 bytes is refused first,
/// naming the rule. Below 2.32.3 the error names the version instead.
#[test]
fn encryption_on_the_real_library_is_refused_early_and_named() {
    let Some(lib) = library() else { return };
    let short = lib.set_encryption_psk("0123456789abcdef").unwrap_err().to_string();
    assert!(short.contains("is 16 bytes; NCCL requires a pre-shared key of at least 32 bytes"), "{short}");
    let e = lib.set_encryption_psk("0123456789abcdef0123456789abcdef-test-only").unwrap_err().to_string();
    if lib.version() < mcore_init::backend::nccl::NcclVersion::new(2, 32, 3) {
        assert!(e.contains("needs NCCL 2.32.3"), "{e}");
        return;
    }
    eprintln!("NCCL {} at {}: {e}", lib.version(), lib.path());
    assert!(lib.built_without_tls(), "NVIDIA's PyPI build carries NCCL's no-TLS message");
    assert!(e.contains("this NCCL was built without TLS") && e.contains("unset MCORE_NCCL_PSK_FILE"), "{e}");
    assert!(e.contains("libnccl.so.2"), "names the file: {e}");
}

/// Issue 36 (cuda-checkpoint): the real library opened `RTLD_GLOBAL` with every symbol resolved
/// through the process's global scope works as the private one does (version, unique id).
#[test]
fn the_real_library_works_with_global_symbols() {
    let Some(private) = library() else { return };
    let mut search = LibrarySearch::explicit(private.path());
    search.global_symbols = true;
    let lib = NcclLibrary::load(&search).expect("the real library resolved globally");
    assert!(lib.global_symbols() && !private.global_symbols());
    assert_eq!(lib.version(), private.version());
    assert_eq!(lib.unique_id().expect("a unique id without a GPU").as_bytes().len(), 128);
}

/// Issue 44: ids minted through the C API by the real library (`ncclGetUniqueId`, no GPU) are 128
/// bytes, distinct, and survive standard base64 both ways; the library query names the file and
/// version the backend uses.
#[test]
fn ids_minted_through_the_c_api_are_distinct_and_survive_base64() {
    use mcore_init::ffi::id_group::*;
    use mcore_init::ffi::mcore_status;
    let Some(lib) = library() else { return };
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (mut id, mut n) = ([0u8; 128], 0usize);
        // SAFETY: a 128-byte buffer and a writable length.
        assert_eq!(unsafe { mcore_unique_id_create(c"nccl".as_ptr(), id.as_mut_ptr(), 128, &mut n) }, mcore_status::Ok);
        assert_eq!(n, 128);
        let mut text = [0 as std::ffi::c_char; 173];
        // SAFETY: readable id, writable text and length.
        let s = unsafe { mcore_unique_id_to_base64(id.as_ptr(), 128, text.as_mut_ptr(), text.len(), &mut n) };
        assert_eq!((s, n), (mcore_status::Ok, 173));
        let mut back = [0u8; 128];
        // SAFETY: NUL-terminated text (written above), writable buffer and length.
        let s = unsafe { mcore_unique_id_from_base64(text.as_ptr(), back.as_mut_ptr(), 128, &mut n) };
        assert_eq!((s, n, back), (mcore_status::Ok, 128, id));
        assert!(!seen.contains(&id), "ncclGetUniqueId repeated an id");
        seen.push(id);
    }
    let (mut path, mut n, mut code, mut shared) = ([0 as std::ffi::c_char; 4096], 0usize, 0u32, true);
    // SAFETY: writable buffer and outs.
    let s = unsafe { mcore_nccl_library_info(path.as_mut_ptr(), path.len(), &mut n, &mut code, &mut shared) };
    assert_eq!(s, mcore_status::Ok);
    // SAFETY: NUL-terminated by the call.
    let path = unsafe { std::ffi::CStr::from_ptr(path.as_ptr()) }.to_string_lossy().into_owned();
    assert_eq!((path.as_str(), code), (lib.file().as_str(), lib.version().code()));
}

/// Issue 44: joining with the real library on a machine without a GPU ends at once with
/// LIBRARY_LOAD naming the CUDA driver (never a hang, never a crash), before NCCL is entered.
#[test]
fn a_join_without_a_gpu_is_refused_naming_the_cuda_driver() {
    use mcore_init::ffi::id_group::*;
    use mcore_init::ffi::mcore_status;
    let Some(lib) = library() else { return };
    if std::path::Path::new("/dev/nvidiactl").exists() {
        eprintln!("SKIP: this machine has an NVIDIA driver (the GPU part is scripts/gpu-tests.sh)");
        return;
    }
    let id = lib.unique_id().unwrap().to_bytes();
    let mut args = mcore_id_group_args { id: id.as_ptr(), id_len: 128, world_size: 2, rank: 0, ..Default::default() };
    args.timeout_ms = 5000;
    let mut g = std::ptr::null_mut();
    let start = Instant::now();
    // SAFETY: args with a live id, a writable out-pointer.
    let s = unsafe { mcore_id_group_join(&args, &mut g) };
    // SAFETY: never NULL.
    let msg = unsafe { std::ffi::CStr::from_ptr(mcore_init::ffi::error::mcore_last_error_message()) };
    let msg = msg.to_string_lossy();
    assert_eq!(s, mcore_status::LibraryLoad, "{msg}");
    assert!(msg.contains("libcuda.so.1") && msg.contains("id_group"), "{msg}");
    assert!(g.is_null() && start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
}
