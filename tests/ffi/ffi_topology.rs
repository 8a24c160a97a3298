//! The topology C API called as C would: create, queries for any rank and kind, enumeration,
//! the embedding callback with its user data, and every error path.

use mcore_init::abi::mcore_status;
use mcore_init::ffi::error::mcore_last_error_message;
use mcore_init::ffi::topology::*;
use mcore_init::topology::{GroupKind, Topology, TopologyConfig};
use std::ffi::{c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};

fn last_error() -> String {
    unsafe { CStr::from_ptr(mcore_last_error_message()) }.to_string_lossy().into_owned()
}

fn config() -> mcore_topology_config {
    unsafe {
        let mut c = std::mem::MaybeUninit::<mcore_topology_config>::zeroed();
        assert_eq!(mcore_topology_config_init(c.as_mut_ptr()), mcore_status::Ok);
        c.assume_init()
    }
}

fn create(c: &mcore_topology_config, world: u32) -> Result<*mut mcore_topology, (mcore_status, String)> {
    unsafe {
        let mut t = null_mut();
        match mcore_topology_create(c, world, &mut t) {
            mcore_status::Ok => Ok(t),
            s => {
                assert!(t.is_null(), "out written on failure");
                Err((s, last_error()))
            }
        }
    }
}

fn kind(name: &str) -> i32 {
    unsafe {
        let mut k = -1;
        let c = CString::new(name).unwrap();
        assert_eq!(mcore_group_kind_from_name(c.as_ptr(), &mut k), mcore_status::Ok, "{name}");
        k
    }
}

fn ranks(t: *const mcore_topology, rank: u32, kind: i32) -> Vec<u32> {
    unsafe {
        let mut need = 0usize;
        let s = mcore_topology_group_ranks(t, rank, kind, null_mut(), 0, &mut need);
        assert_eq!(s, mcore_status::BufferTooSmall);
        let mut buf = vec![0u32; need];
        let mut n = 0usize;
        assert_eq!(mcore_topology_group_ranks(t, rank, kind, buf.as_mut_ptr(), buf.len(), &mut n), mcore_status::Ok);
        assert_eq!(n, need);
        buf
    }
}

#[test]
fn queries_agree_with_the_engine_for_every_rank_and_kind() {
    unsafe {
        let mut c = config();
        c.tp = 2;
        c.pp = 2;
        c.cp = 4;
        c.ep = 2;
        c.etp = 1;
        c.dist_opt_instances = 2;
        let hcp = [2i32, 2];
        c.hcp = hcp.as_ptr();
        c.hcp_len = 2;
        let order = CString::new("tp-cp-ep-dp-pp").unwrap();
        c.order = order.as_ptr();
        let t = create(&c, 64).unwrap();
        let engine = Topology::new(
            TopologyConfig {
                tp: 2,
                pp: 2,
                cp: 4,
                ep: 2,
                etp: Some(1),
                dist_opt_instances: 2,
                hierarchical_cp: vec![2, 2],
                ..Default::default()
            },
            64,
        )
        .unwrap();
        let mut sizes = mcore_topology_sizes::default();
        assert_eq!(mcore_topology_get_sizes(t, &mut sizes), mcore_status::Ok);
        assert_eq!((sizes.dp, sizes.expert_dp, sizes.hcp_levels, sizes.etp), (4, 16, 2, 1));

        let mut nkinds = 0usize;
        assert_eq!(mcore_topology_kind_count(t, &mut nkinds), mcore_status::Ok);
        assert_eq!(nkinds, engine.kinds().len());
        for (i, k) in engine.kinds().into_iter().enumerate() {
            let mut ck = -1;
            assert_eq!(mcore_topology_kind_at(t, i, &mut ck), mcore_status::Ok);
            assert_eq!(ck, kind(&k.key()));
            let mut buf = [0u8; 64];
            let mut n = 0;
            assert_eq!(mcore_group_kind_name(ck, buf.as_mut_ptr().cast(), buf.len(), &mut n), mcore_status::Ok);
            assert_eq!(CStr::from_bytes_with_nul(&buf[..n]).unwrap().to_str().unwrap(), k.key());
            let mut count = 0u64;
            assert_eq!(mcore_topology_group_count(t, ck, &mut count), mcore_status::Ok);
            assert_eq!(count, engine.group_count(k));
            for idx in 0..count {
                let mut need = 0usize;
                assert_eq!(mcore_topology_group_at(t, ck, idx, null_mut(), 0, &mut need), mcore_status::BufferTooSmall);
                let mut g = vec![0u32; need];
                let mut n = 0usize;
                assert_eq!(mcore_topology_group_at(t, ck, idx, g.as_mut_ptr(), g.len(), &mut n), mcore_status::Ok);
                assert_eq!(g, engine.group(k, idx).unwrap().members());
            }
            for rank in 0..64 {
                let mut info = mcore_group_info::default();
                match engine.membership(k, rank).unwrap() {
                    Some(m) => {
                        assert_eq!(mcore_topology_group(t, rank, ck, &mut info), mcore_status::Ok);
                        assert_eq!((info.index, info.rank, info.size), (m.group_index(), m.rank, m.size()));
                        assert_eq!(ranks(t, rank, ck), m.members());
                    }
                    None => {
                        assert_eq!(mcore_topology_group(t, rank, ck, &mut info), mcore_status::NotMember);
                        assert!(last_error().contains(&format!("rank {rank}")), "{}", last_error());
                    }
                }
            }
        }
        for rank in 0..64 {
            let mut p = mcore_pipeline_info::default();
            assert_eq!(mcore_topology_pipeline(t, rank, &mut p), mcore_status::Ok);
            let e = engine.pipeline(rank).unwrap();
            assert_eq!(
                (p.stage, p.num_stages, p.first, p.last, p.next, p.prev),
                (e.rank, e.size, e.first, e.last, e.next, e.prev)
            );
            let (mut first, mut last, mut emb) = (false, false, false);
            assert_eq!(mcore_topology_is_pipeline_first_stage(t, rank, -1, &mut first), mcore_status::Ok);
            assert_eq!(mcore_topology_is_pipeline_last_stage(t, rank, 0, &mut last), mcore_status::Ok);
            assert_eq!(mcore_topology_is_rank_in_embedding_group(t, rank, -1, &mut emb), mcore_status::Ok);
            assert_eq!((first, last), (e.rank == 0, e.rank == 1));
            assert_eq!(emb, engine.group_of(GroupKind::Embedding, rank).unwrap().is_some());
        }
        mcore_topology_destroy(t);
    }
}

#[test]
fn bad_configs_and_arguments_are_named() {
    unsafe {
        let bad = |f: &dyn Fn(&mut mcore_topology_config), world: u32, status: mcore_status, needle: &str| {
            let mut c = config();
            f(&mut c);
            let (s, msg) = create(&c, world).unwrap_err();
            assert_eq!(s, status, "{msg}");
            assert!(msg.contains(needle), "'{msg}' lacks '{needle}'");
        };
        bad(&|c| c.tp = -3, 8, mcore_status::InvalidConfig, "tp = -3");
        bad(&|c| c.tp = 0, 8, mcore_status::InvalidConfig, "got 0");
        bad(&|c| c.tp = 3, 8, mcore_status::InvalidConfig, "world size 8");
        bad(&|c| c.vpp = 2, 8, mcore_status::InvalidConfig, "pp = 1");
        bad(&|c| c.hcp_len = 2, 8, mcore_status::InvalidArgument, "hcp is NULL");
        bad(&|c| c.struct_size = 0, 8, mcore_status::InvalidArgument, "struct_size 0");
        let order = CString::new("tp-xx-dp-pp").unwrap();
        let p = order.as_ptr() as usize;
        bad(&move |c| c.order = p as *const _, 8, mcore_status::InvalidConfig, "'xx'");
        bad(&|_| {}, 0, mcore_status::InvalidConfig, "world size");

        let mut t = null_mut();
        assert_eq!(mcore_topology_create(null(), 8, &mut t), mcore_status::InvalidArgument);
        assert!(last_error().contains("cfg is NULL"));
        let c = config();
        assert_eq!(mcore_topology_create(&c, 8, null_mut()), mcore_status::InvalidArgument);
        assert_eq!(mcore_topology_config_init(null_mut()), mcore_status::InvalidArgument);

        let t = create(&c, 8).unwrap();
        let mut info = mcore_group_info::default();
        assert_eq!(mcore_topology_group(null(), 0, 0, &mut info), mcore_status::InvalidArgument);
        assert!(last_error().contains("topology is NULL"));
        assert_eq!(mcore_topology_group(t, 0, 0, null_mut()), mcore_status::InvalidArgument);
        assert_eq!(mcore_topology_group(t, 0, 57, &mut info), mcore_status::InvalidArgument);
        assert!(last_error().contains("57"), "{}", last_error());
        assert_eq!(mcore_topology_group(t, 0, -2, &mut info), mcore_status::InvalidArgument);
        // Issue 34.7: a large number is no hierarchical level (it used to answer NOT_MEMBER for
        // "hierarchical_context_parallel_8999").
        for unknown in [9999, i32::MAX, 1064] {
            assert_eq!(mcore_topology_group(t, 0, unknown, &mut info), mcore_status::InvalidArgument);
            assert!(last_error().contains(&format!("unknown group kind {unknown}")), "{}", last_error());
            let mut count = 0u64;
            assert_eq!(mcore_topology_group_count(t, unknown, &mut count), mcore_status::InvalidArgument);
            let mut nb = [0i8; 64];
            let mut need = 0usize;
            assert_eq!(
                mcore_group_kind_name(unknown, nb.as_mut_ptr().cast(), nb.len(), &mut need),
                mcore_status::InvalidArgument
            );
        }
        assert_eq!(mcore_topology_group(t, 8, 0, &mut info), mcore_status::OutOfRange);
        assert!(last_error().contains("rank 8"), "{}", last_error());
        // A kind the layout lacks (no hierarchical cp, one instance): not a member.
        let hcp0 = mcore_group_kind::HierarchicalContextParallel as i32;
        assert_eq!(mcore_topology_group(t, 0, hcp0, &mut info), mcore_status::NotMember);
        assert_eq!(
            mcore_topology_group(t, 0, mcore_group_kind::InterPartialExpertDataParallel as i32, &mut info),
            mcore_status::NotMember
        );
        let mut count = 9u64;
        assert_eq!(mcore_topology_group_count(t, hcp0, &mut count), mcore_status::Ok);
        assert_eq!(count, 0);
        let mut buf = [0u32; 1];
        let mut n = 0usize;
        assert_eq!(mcore_topology_group_at(t, 0, 8, buf.as_mut_ptr(), 1, &mut n), mcore_status::OutOfRange);
        assert_eq!(mcore_topology_group_at(t, 0, 0, buf.as_mut_ptr(), 1, null_mut()), mcore_status::InvalidArgument);
        assert_eq!(mcore_topology_group_ranks(t, 0, 2, null_mut(), 8, &mut n), mcore_status::InvalidArgument);
        let mut b = false;
        assert_eq!(mcore_topology_is_pipeline_first_stage(t, 0, 1, &mut b), mcore_status::OutOfRange);
        assert_eq!(mcore_topology_is_pipeline_first_stage(t, 0, -7, &mut b), mcore_status::InvalidArgument);
        let mut k = 0;
        let name = CString::new("no_such_kind").unwrap();
        assert_eq!(mcore_group_kind_from_name(name.as_ptr(), &mut k), mcore_status::NotFound);
        assert!(last_error().contains("no_such_kind"));
        assert_eq!(mcore_group_kind_from_name(null(), &mut k), mcore_status::InvalidArgument);
        let mut small = [0i8; 4];
        assert_eq!(mcore_group_kind_name(0, small.as_mut_ptr().cast(), 4, &mut n), mcore_status::BufferTooSmall);
        assert_eq!(n, "tensor_model_parallel".len() + 1);
        let mut kk = 0;
        assert_eq!(mcore_topology_kind_at(t, 99, &mut kk), mcore_status::OutOfRange);
        mcore_topology_destroy(t);
        mcore_topology_destroy(null_mut());
    }
}

static FREED: AtomicUsize = AtomicUsize::new(0);

/// Embedding = the second and last stage; user_data counts the calls.
unsafe extern "C" fn second_and_last(
    user_data: *mut c_void,
    pipeline: *const u32,
    len: usize,
    out: *mut u32,
    cap: usize,
    out_len: *mut usize,
) -> i32 {
    let calls = unsafe { &*(user_data as *const AtomicUsize) };
    calls.fetch_add(1, Ordering::SeqCst);
    let p = unsafe { std::slice::from_raw_parts(pipeline, len) };
    if cap < 2 {
        return 1;
    }
    unsafe {
        *out = p[1];
        *out.add(1) = p[len - 1];
        *out_len = 2;
    }
    0
}

unsafe extern "C" fn failing(_: *mut c_void, _: *const u32, _: usize, _: *mut u32, _: usize, _: *mut usize) -> i32 {
    7
}

unsafe extern "C" fn free_counter(user_data: *mut c_void) {
    drop(unsafe { Box::from_raw(user_data as *mut AtomicUsize) });
    FREED.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn embedding_callback_and_user_data_lifetime() {
    unsafe {
        let calls = Box::into_raw(Box::new(AtomicUsize::new(0)));
        let mut c = config();
        c.pp = 4;
        c.embedding_ranks = Some(second_and_last);
        c.user_data = calls.cast();
        c.user_data_free = Some(free_counter);
        let t = create(&c, 8).unwrap();
        // pp groups [0,2,4,6] and [1,3,5,7]: embedding [2,6] and [3,7].
        assert_eq!(ranks(t, 6, mcore_group_kind::Embedding as i32), vec![2, 6]);
        let mut info = mcore_group_info::default();
        assert_eq!(mcore_topology_group(t, 0, mcore_group_kind::Embedding as i32, &mut info), mcore_status::NotMember);
        assert_eq!(mcore_topology_group(t, 7, mcore_group_kind::Embedding as i32, &mut info), mcore_status::Ok);
        assert_eq!((info.index, info.rank, info.size), (1, 1, 2));
        assert!((*calls).load(Ordering::SeqCst) > 0);
        // Position embedding keeps the default (first stage).
        assert_eq!(ranks(t, 1, mcore_group_kind::PositionEmbedding as i32), vec![1]);
        assert_eq!(FREED.load(Ordering::SeqCst), 0);
        mcore_topology_destroy(t);
        assert_eq!(FREED.load(Ordering::SeqCst), 1, "user_data_free runs once on destroy");

        // A failed create leaves user_data with the caller (no finalizer call).
        let calls = Box::into_raw(Box::new(AtomicUsize::new(0)));
        c.user_data = calls.cast();
        c.tp = 3;
        assert!(create(&c, 8).is_err());
        assert_eq!(FREED.load(Ordering::SeqCst), 1);
        drop(Box::from_raw(calls));

        // A failing callback surfaces as an error naming its status and the pipeline.
        let mut c = config();
        c.pp = 2;
        c.position_embedding_ranks = Some(failing);
        let t = create(&c, 4).unwrap();
        let mut need = 0usize;
        let s = mcore_topology_group_ranks(t, 0, mcore_group_kind::PositionEmbedding as i32, null_mut(), 0, &mut need);
        assert_eq!(s, mcore_status::InvalidConfig);
        assert!(last_error().contains("returned 7") && last_error().contains("[0, 2]"), "{}", last_error());
        mcore_topology_destroy(t);
    }
}

/// Megatron-Core 0.19 through C: the appended config fields, the appended kind numbers (older
/// numbers unchanged), the gtp sizes, and a rank outside a local world reported as in no group.
#[test]
fn gtp_and_local_world_through_c() {
    assert_eq!(kind("inter_partial_expert_data_parallel"), 19, "older numbers stay");
    let keys = [
        "gtp_weight_remat",
        "data_parallel_with_gtp_remat",
        "data_parallel_with_cp_with_gtp_remat",
        "expert_gtp_weight_remat",
        "expert_tensor_model_pipeline_parallel_with_egtp",
        "expert_data_parallel_with_gtp_remat",
    ];
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(kind(key), 20 + i as i32, "{key}");
    }
    assert_eq!(mcore_group_kind::ExpertDataParallelWithGtpRemat as i32, 25);
    let mut c = config();
    assert_eq!((c.gtp, c.egtp, c.local_world_size), (1, 1, 0));
    c.tp = 2;
    c.gtp = 2;
    c.local_world_size = 8;
    c.rank_offset = 8;
    let t = create(&c, 16).unwrap();
    let engine = Topology::new(
        TopologyConfig { tp: 2, gtp: 2, local_world_size: Some(8), rank_offset: 8, ..Default::default() },
        16,
    )
    .unwrap();
    assert_eq!(
        ranks(t, 9, kind("gtp_weight_remat")),
        engine.group_of(GroupKind::GtpWeightRemat, 9).unwrap().unwrap().members()
    );
    assert_eq!(ranks(t, 9, kind("gtp_weight_remat")), vec![9, 11]);
    unsafe {
        let (mut g, mut e, mut total, mut local) = (0, 0, 0, 0);
        assert_eq!(mcore_topology_get_gtp_sizes(t, &mut g, &mut e, &mut total, &mut local), mcore_status::Ok);
        assert_eq!((g, e, total, local), (2, 1, 16, 8));
        // A NULL out-pointer fails the call and no out-pointer is written (out_gtp was, before
        // out_egtp was checked).
        for null_at in 0..4 {
            let mut outs = [77u32; 4];
            let p = |i: usize, o: &mut [u32; 4]| if i == null_at { null_mut() } else { &mut o[i] as *mut u32 };
            let (a, b, c2, d) = (p(0, &mut outs), p(1, &mut outs), p(2, &mut outs), p(3, &mut outs));
            assert_eq!(mcore_topology_get_gtp_sizes(t, a, b, c2, d), mcore_status::InvalidArgument);
            assert_eq!(outs, [77; 4], "NULL at {null_at}: an out-pointer was written on a failing call");
        }
        let mut inside = true;
        assert_eq!(mcore_topology_rank_in_grid(t, 3, &mut inside), mcore_status::Ok);
        assert!(!inside);
        assert_eq!(mcore_topology_rank_in_grid(t, 16, &mut inside), mcore_status::OutOfRange);
        let mut info = mcore_group_info::default();
        assert_eq!(mcore_topology_group(t, 3, kind("tensor_model_parallel"), &mut info), mcore_status::NotMember);
        assert!(last_error().contains("outside the grid (ranks 8..15 of a world of 16)"), "{}", last_error());
        mcore_topology_destroy(t);
    }
    // A struct_size that is no released layout (ABI 2 has one) is refused, naming both sizes.
    let mut old = config();
    old.struct_size = std::mem::offset_of!(mcore_topology_config, gtp) as u32;
    let (status, message) = create(&old, 8).unwrap_err();
    assert_eq!(status, mcore_status::InvalidArgument);
    let ours = std::mem::size_of::<mcore_topology_config>();
    assert!(
        message.contains(&format!("struct_size {} ", old.struct_size)) && message.contains(&ours.to_string()),
        "{message}"
    );
    let mut bad = config();
    bad.gtp = 0;
    assert!(create(&bad, 8).unwrap_err().1.contains("gtp"));
    bad.gtp = 3;
    assert!(create(&bad, 8).unwrap_err().1.contains("gtp"));
}
