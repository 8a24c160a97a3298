//! The node-placement C API (mcore_topology_node_placement / mcore_topology_node_warning) called
//! as C would, compared with the Rust function, and its error paths.

use mcore_init::abi::mcore_status;
use mcore_init::ffi::error::mcore_last_error_message;
use mcore_init::ffi::topology::*;
use mcore_init::ffi::topology_nodes::*;
use std::ffi::CStr;
use std::ptr::{null, null_mut};

fn last_error() -> String {
    unsafe { CStr::from_ptr(mcore_last_error_message()) }.to_string_lossy().into_owned()
}

fn create(tp: i32, pp: i32, world: u32) -> *mut mcore_topology {
    unsafe {
        let mut c = std::mem::MaybeUninit::<mcore_topology_config>::zeroed();
        assert_eq!(mcore_topology_config_init(c.as_mut_ptr()), mcore_status::Ok);
        let mut c = c.assume_init();
        c.tp = tp;
        c.pp = pp;
        let mut t = null_mut();
        assert_eq!(mcore_topology_create(&c, world, &mut t), mcore_status::Ok);
        t
    }
}

#[test]
fn placement_and_warnings_through_c() {
    let t = create(8, 2, 32);
    unsafe {
        let (mut n, mut warnings) = (0usize, 0usize);
        assert_eq!(
            mcore_topology_node_placement(t, 4, null_mut(), 0, &mut n, &mut warnings),
            mcore_status::BufferTooSmall
        );
        let mut kinds = 0usize;
        assert_eq!(mcore_topology_kind_count(t, &mut kinds), mcore_status::Ok);
        assert_eq!(n, kinds);
        let mut buf = vec![mcore_kind_placement::default(); n];
        assert_eq!(mcore_topology_node_placement(t, 4, buf.as_mut_ptr(), n, &mut n, &mut warnings), mcore_status::Ok);
        assert_eq!(warnings, 1);
        let tp = buf[0];
        assert_eq!(tp.kind, mcore_group_kind::TensorModelParallel as i32);
        assert_eq!((tp.groups, tp.local, tp.crossing, tp.first_crossing, tp.max_nodes), (4, 0, 4, 0, 2));
        let cp = buf.iter().find(|k| k.kind == mcore_group_kind::ContextParallel as i32).unwrap();
        assert_eq!((cp.crossing, cp.first_crossing), (0, MCORE_NO_GROUP));

        let (mut kind, mut len) = (-1i32, 0usize);
        assert_eq!(
            mcore_topology_node_warning(t, 4, 0, &mut kind, null_mut(), 0, &mut len),
            mcore_status::BufferTooSmall
        );
        let mut text = vec![0 as std::ffi::c_char; len];
        assert_eq!(mcore_topology_node_warning(t, 4, 0, &mut kind, text.as_mut_ptr(), len, &mut len), mcore_status::Ok);
        let msg = CStr::from_ptr(text.as_ptr()).to_str().unwrap();
        assert_eq!(kind, mcore_group_kind::TensorModelParallel as i32);
        assert!(msg.contains("4 of 4 groups cross nodes") && msg.contains("--tp 4 --pp 4"), "{msg}");
        assert_eq!(
            mcore_topology_node_warning(t, 4, 1, &mut kind, text.as_mut_ptr(), len, &mut len),
            mcore_status::OutOfRange
        );
        assert!(last_error().contains("warning index 1 out of range: 1 warnings"), "{}", last_error());

        // 8 GPUs per node: no warnings; out_warnings may be NULL.
        assert_eq!(mcore_topology_node_placement(t, 8, buf.as_mut_ptr(), n, &mut n, &mut warnings), mcore_status::Ok);
        assert_eq!(warnings, 0);
        assert_eq!(buf[0].local, 4);
        assert_eq!(mcore_topology_node_placement(t, 8, buf.as_mut_ptr(), n, &mut n, null_mut()), mcore_status::Ok);

        // Errors name the value.
        assert_eq!(
            mcore_topology_node_placement(t, 0, buf.as_mut_ptr(), n, &mut n, null_mut()),
            mcore_status::InvalidConfig
        );
        assert!(last_error().contains("gpus_per_node 0"), "{}", last_error());
        assert_eq!(
            mcore_topology_node_placement(null(), 4, buf.as_mut_ptr(), n, &mut n, null_mut()),
            mcore_status::InvalidArgument
        );
        assert_eq!(
            mcore_topology_node_placement(t, 4, null_mut(), 99, &mut n, null_mut()),
            mcore_status::InvalidArgument
        );
        assert_eq!(
            mcore_topology_node_warning(t, 4, 0, null_mut(), text.as_mut_ptr(), len, &mut len),
            mcore_status::InvalidArgument
        );
        mcore_topology_destroy(t);
    }
}
