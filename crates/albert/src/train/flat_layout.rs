//! What the flat optimiser and its rules share (`super::flat`, `super::flat_lamb`,
//! `super::flat_adamw`): where each parameter lies in the flat vector, and one parameter's
//! state between a checkpoint and the flat moments.

use burn::module::ParamId;
use burn::tensor::{Device, Int, Shape, Tensor, TensorData};

/// One parameter's state, its moments as flat vectors.
#[derive(Debug, Clone)]
pub(super) struct Moments {
    /// The module path it was found at, which picks its group when burn loads the file.
    pub(super) path: Option<String>,
    pub(super) dims: Vec<usize>,
    /// Steps taken (the `time` of burn's states).
    pub(super) time: usize,
    pub(super) m: Tensor<1>,
    pub(super) v: Tensor<1>,
}

impl Moments {
    /// A state's step count and moments, in the parameter's shape of rank `D`, as flat
    /// moments (its path still unknown).
    pub(super) fn from_shaped<const D: usize>(time: usize, m: Tensor<D>, v: Tensor<D>) -> Moments {
        let dims = m.dims().to_vec();
        let n = dims.iter().product::<usize>();
        Moments {
            path: None,
            dims,
            time,
            m: m.reshape([n]),
            v: v.reshape([n]),
        }
    }

    /// The step count and the moments in the parameter's shape (of rank `D`), as burn's states
    /// hold them.
    pub(super) fn shaped<const D: usize>(self) -> (usize, Tensor<D>, Tensor<D>) {
        let shape = Shape::from(self.dims);
        (
            self.time,
            self.m.reshape(shape.clone()),
            self.v.reshape(shape),
        )
    }
}

/// What a step needs to know of each parameter of a flat vector: its place, length and the
/// rule's values.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    pub(super) slots: Vec<Slot>,
    /// `[rows, parameters]`: the values its rule keeps of each parameter.
    pub(super) per_param: Tensor<2>,
    /// [`Self::per_param`] as the host made it, row-major.
    pub(super) per_param_values: Vec<f32>,
    /// `[elements]`: the parameter each element belongs to, for a rule that needs it (made
    /// once by [`Self::segments`]).
    pub(super) segments: Option<Tensor<1, Int>>,
}

impl Layout {
    /// `[parameters]`: each one's number of elements.
    pub(super) fn host_lengths(&self) -> Vec<i64> {
        self.slots.iter().map(|s| s.len() as i64).collect()
    }

    /// `[elements]`: the index of the parameter each element of the flat vector belongs to,
    /// made on `device` at the first call and kept (8 bytes an element: made only for a rule
    /// that reads it).
    pub(super) fn segments(&mut self, device: &Device) -> Tensor<1, Int> {
        let slots = &self.slots;
        let made = || {
            let index: Vec<i64> = slots
                .iter()
                .enumerate()
                .flat_map(|(k, s)| std::iter::repeat_n(k as i64, s.len()))
                .collect();
            let n = index.len();
            crate::upload::ints(TensorData::new(index, [n]), device)
        };
        self.segments.get_or_insert_with(made).clone()
    }
}

/// One parameter's place in a flat vector.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub(super) id: ParamId,
    /// The module path it was found at (the no-decay group matches it).
    pub(super) path: String,
    pub(super) dims: Vec<usize>,
    /// Steps taken before this one.
    pub(super) time: usize,
}

impl Slot {
    pub(super) fn len(&self) -> usize {
        self.dims.iter().product()
    }
}

/// `at::<D>(args)` for the rank `rank` (1 to 4), `None` for another: burn's states are typed
/// by their rank.
macro_rules! by_rank {
    ($rank:expr, $at:ident ($($arg:expr),*)) => {
        match $rank {
            1 => $at::<1>($($arg),*),
            2 => $at::<2>($($arg),*),
            3 => $at::<3>($($arg),*),
            4 => $at::<4>($($arg),*),
            _ => None,
        }
    };
}
pub(super) use by_rank;
