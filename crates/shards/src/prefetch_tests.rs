use crate::tests::{cfg, inst, paths, row_ids, three_shards, write};
use crate::*;

#[test]
fn the_same_batches_and_positions_as_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let files = three_shards(dir.path());
    let mut direct = BatchReader::open(&files, cfg(3)).unwrap();
    let mut ahead = Prefetch::spawn(BatchReader::open(&files, cfg(3)).unwrap(), 2).unwrap();
    assert_eq!(ahead.instances_per_epoch(), 17);
    assert_eq!(
        ahead.position(),
        direct.position(),
        "before the first batch"
    );
    for _ in 0..20 {
        let want = direct.next_batch().unwrap().unwrap();
        let got = ahead.next_batch().unwrap().unwrap();
        assert_eq!(row_ids(&got), row_ids(&want));
        assert_eq!(got, want);
        assert_eq!(
            ahead.position(),
            direct.position(),
            "after a batch handed out"
        );
    }
}

#[test]
fn a_prefetched_position_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let files = three_shards(dir.path());
    let mut ahead = Prefetch::spawn(BatchReader::open(&files, cfg(4)).unwrap(), 3).unwrap();
    for _ in 0..5 {
        ahead.next_batch().unwrap();
    }
    // The thread is batches ahead; the position is that of the last batch handed out.
    let saved = ahead.position();
    let next = ahead.next_batch().unwrap().unwrap();
    drop(ahead);
    let mut resumed = BatchReader::resume(&files, cfg(4), &saved).unwrap();
    assert_eq!(resumed.next_batch().unwrap().unwrap(), next);
}

#[test]
fn a_finite_reader_ends_and_an_error_is_handed_on() {
    let dir = tempfile::tempdir().unwrap();
    let files = three_shards(dir.path());
    let one_pass = BatchReader::eval(&files, cfg(5)).unwrap();
    let mut ahead = Prefetch::spawn(one_pass, 1).unwrap();
    let sizes: Vec<usize> = std::iter::from_fn(|| ahead.next_batch().unwrap())
        .map(|b| b.batch_size)
        .collect();
    assert_eq!(sizes, [5, 5, 5, 2]);
    assert!(ahead.next_batch().unwrap().is_none(), "still the end");

    let bad = paths(dir.path(), &write(dir.path(), "bad", 10, &[inst(1, 20, 3)]));
    let reader = BatchReader::eval(&bad, BatchReaderConfig::new(1, 16, 8)).unwrap();
    let mut ahead = Prefetch::spawn(reader, 2).unwrap();
    let e = format!("{:#}", ahead.next_batch().unwrap_err());
    assert!(
        e.contains("bad-00000.arrow") && e.contains("max_seq_length 16"),
        "{e}"
    );
}

#[test]
fn dropping_it_stops_the_thread_that_waits_to_send() {
    let dir = tempfile::tempdir().unwrap();
    let files = three_shards(dir.path());
    // Endless: the thread fills the channel and blocks; the drop must still return.
    let ahead = Prefetch::spawn(BatchReader::open(&files, cfg(2)).unwrap(), 1).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    drop(ahead);
}
