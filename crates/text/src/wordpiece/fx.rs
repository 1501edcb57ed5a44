//! FxHash (rustc's hasher) for the word-piece maps.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A small, fast hasher for short string keys (the FxHash of rustc): the default SipHash would
/// dominate the cost of tokenising ASCII words.
#[derive(Default, Clone, Copy)]
pub(super) struct FxHasher {
    hash: u64,
}

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.hash = (self.hash.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, mut bytes: &[u8]) {
        while let Some((head, rest)) = bytes.split_first_chunk::<8>() {
            self.add(u64::from_le_bytes(*head));
            bytes = rest;
        }
        if let Some((head, rest)) = bytes.split_first_chunk::<4>() {
            self.add(u32::from_le_bytes(*head) as u64);
            bytes = rest;
        }
        for &b in bytes {
            self.add(b as u64);
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A map from word pieces to ids, hashed with [`FxHasher`].
pub(super) type FxMap = HashMap<Box<str>, u32, BuildHasherDefault<FxHasher>>;
