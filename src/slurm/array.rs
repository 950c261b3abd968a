//! Job-array specs and the split of a plan's run indices into arrays (DESIGN 8).
//!
//! Slurm array task ids run from 0 to `MaxArraySize - 1` (`scontrol show config`), so a plan with
//! more runs than that, or a resume of runs whose plan index is `MaxArraySize` or more, cannot use
//! the plan index as the task id. [`split`] cuts the sorted indices into [`ArrayChunk`]s, each with
//! an `offset`: the task with id `t` of a chunk runs plan index `offset + t`. The offset is
//! written into that chunk's batch script ([`crate::slurm::script`]), so a task needs nothing
//! but `SLURM_ARRAY_TASK_ID` to know its run. When every index is below `MaxArraySize` there is
//! one chunk with offset 0 and task ids equal plan indices (`--array=3,7,9` resumes runs 3, 7, 9).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The `--array` value: task ids (sorted, distinct) and an optional throttle (`%N`, at most N
/// tasks of this array running at once).
///
/// Rendered by `Display` in compressed form: consecutive ids become ranges, `0-3,7,9%2`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    task_ids: Vec<u32>,
    /// `%N`: at most N tasks of the array run at once; `None` = no throttle.
    pub throttle: Option<u32>,
}

/// A malformed array spec (from [`ArraySpec::parse`]), or one that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArraySpecError {
    /// An array needs at least one task id.
    #[error("an array needs at least one task id")]
    Empty,
    /// The text is not `a`, `a-b` or `a-b:step` items separated by commas with an optional `%N`.
    #[error("invalid array spec \"{spec}\": {reason}")]
    Syntax {
        /// The text as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl ArraySpec {
    /// A spec over `task_ids` (any order, duplicates dropped) with `throttle`.
    ///
    /// # Errors
    /// [`ArraySpecError::Empty`] when `task_ids` is empty.
    pub fn new(
        task_ids: impl IntoIterator<Item = u32>,
        throttle: Option<u32>,
    ) -> Result<Self, ArraySpecError> {
        let mut task_ids: Vec<u32> = task_ids.into_iter().collect();
        task_ids.sort_unstable();
        task_ids.dedup();
        if task_ids.is_empty() {
            return Err(ArraySpecError::Empty);
        }
        Ok(ArraySpec { task_ids, throttle })
    }

    /// The task ids, sorted and distinct.
    pub fn task_ids(&self) -> &[u32] {
        &self.task_ids
    }

    /// Parses Slurm's array syntax as `sbatch --array`, `squeue -o %K` and `scontrol show job`'s
    /// `ArrayTaskId=` write it: comma-separated `a`, `a-b` or `a-b:step`, then optionally `%N`
    /// (`0-3,7,9%2`, `0-1000:2%4`, `1,3%1`).
    ///
    /// # Errors
    /// [`ArraySpecError::Syntax`] naming the problem; [`ArraySpecError::Empty`] never (the
    /// syntax needs at least one item).
    pub fn parse(spec: &str) -> Result<Self, ArraySpecError> {
        let bad = |reason: &str| ArraySpecError::Syntax {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let number = |s: &str| -> Result<u32, ArraySpecError> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(&format!("`{s}` is not a task id")));
            }
            s.parse().map_err(|_| bad(&format!("`{s}` is too large")))
        };
        let (items, throttle) = match spec.split_once('%') {
            Some((items, t)) => (items, Some(number(t)?)),
            None => (spec, None),
        };
        let mut ids = Vec::new();
        for item in items.split(',') {
            let (range, step) = match item.split_once(':') {
                Some((r, s)) => (r, number(s)?),
                None => (item, 1),
            };
            if step == 0 {
                return Err(bad("a step of 0"));
            }
            let (lo, hi) = match range.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => {
                    let n = number(range)?;
                    (n, n)
                }
            };
            if lo > hi {
                return Err(bad(&format!("range `{range}` runs backwards")));
            }
            ids.extend((lo..=hi).step_by(step as usize));
        }
        ArraySpec::new(ids, throttle)
    }
}

impl fmt::Display for ArraySpec {
    /// `0-3,7,9%2`: runs of consecutive ids as `a-b`, single ids alone, then `%throttle`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut i = 0;
        while i < self.task_ids.len() {
            let start = self.task_ids[i];
            let mut end = start;
            while i + 1 < self.task_ids.len() && self.task_ids[i + 1] == end + 1 {
                i += 1;
                end += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        if let Some(t) = self.throttle {
            write!(f, "%{t}")?;
        }
        Ok(())
    }
}

/// The cluster's limits on one job array, from `scontrol show config`
/// ([`crate::slurm::SlurmClient::array_limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayLimits {
    /// `MaxArraySize`: task ids must be below it (0 disables job arrays). Slurm's default is 1001.
    pub max_array_size: u32,
    /// `max_array_tasks=N` of `SchedulerParameters`: at most N tasks in one array; `None` when
    /// not set (then only `max_array_size` limits the count).
    pub max_array_tasks: Option<u32>,
}

/// One array of a split plan: task id `t` runs plan index `offset + t`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayChunk {
    /// Plan index of task id 0 (the chunk's first index, or 0 when every index fits as is).
    pub offset: usize,
    /// The chunk's plan indices minus `offset`, sorted, each below `max_array_size`.
    pub task_ids: Vec<u32>,
}

impl ArrayChunk {
    /// The chunk's `--array` value with `throttle` (`jobs`).
    pub fn spec(&self, throttle: Option<u32>) -> ArraySpec {
        ArraySpec {
            task_ids: self.task_ids.clone(),
            throttle,
        }
    }

    /// The plan indices this chunk runs, ascending.
    pub fn plan_indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.task_ids.iter().map(move |&t| self.offset + t as usize)
    }
}

/// Why a set of run indices cannot be submitted as job arrays.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// `MaxArraySize = 0`: the cluster has job arrays turned off.
    #[error("this Slurm cluster has job arrays disabled (MaxArraySize = 0)")]
    ArraysDisabled,
    /// `max_array_tasks=0` in `SchedulerParameters`.
    #[error("this Slurm cluster allows no task in a job array (SchedulerParameters max_array_tasks=0)")]
    NoTasksAllowed,
}

/// Splits plan indices (any order, duplicates dropped) into arrays the cluster accepts.
///
/// When every index is below `max_array_size` (and their count within `max_array_tasks`), the
/// result is one chunk with offset 0, so task ids are plan indices. Otherwise chunks are cut
/// greedily in ascending order: a chunk starts at its first index (its offset) and takes the
/// following indices while `index - offset < max_array_size` and the count stays within
/// `max_array_tasks`. An empty input gives no chunk.
///
/// # Errors
/// [`SplitError`] when the limits allow no array at all.
pub fn split(indices: &[usize], limits: ArrayLimits) -> Result<Vec<ArrayChunk>, SplitError> {
    if limits.max_array_size == 0 {
        return Err(SplitError::ArraysDisabled);
    }
    if limits.max_array_tasks == Some(0) {
        return Err(SplitError::NoTasksAllowed);
    }
    let mut sorted = indices.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let size = limits.max_array_size as usize;
    let max_tasks = limits.max_array_tasks.map_or(usize::MAX, |n| n as usize);
    if let Some(&last) = sorted.last()
        && last < size
        && sorted.len() <= max_tasks
    {
        return Ok(vec![ArrayChunk {
            offset: 0,
            task_ids: sorted.iter().map(|&i| i as u32).collect(),
        }]);
    }
    let mut chunks: Vec<ArrayChunk> = Vec::new();
    for index in sorted {
        match chunks.last_mut() {
            Some(c) if index - c.offset < size && c.task_ids.len() < max_tasks => {
                c.task_ids.push((index - c.offset) as u32);
            }
            _ => chunks.push(ArrayChunk {
                offset: index,
                task_ids: vec![0],
            }),
        }
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits(size: u32) -> ArrayLimits {
        ArrayLimits {
            max_array_size: size,
            max_array_tasks: None,
        }
    }

    #[test]
    fn renders_ranges_singles_and_throttle() {
        let spec = ArraySpec::new([9, 0, 1, 2, 3, 7, 3], Some(2)).unwrap();
        assert_eq!(spec.to_string(), "0-3,7,9%2");
        assert_eq!(ArraySpec::new([5], None).unwrap().to_string(), "5");
        assert_eq!(ArraySpec::new([4, 5], None).unwrap().to_string(), "4-5");
        assert_eq!(ArraySpec::new([3, 7, 9], None).unwrap().to_string(), "3,7,9");
        assert_eq!(ArraySpec::new([], Some(1)), Err(ArraySpecError::Empty));
    }

    #[test]
    fn parses_what_squeue_and_scontrol_print() {
        // Shapes seen from Slurm 22.05: squeue %K of a pending array, scontrol ArrayTaskId=.
        assert_eq!(
            ArraySpec::parse("0-3,7,9%2").unwrap().task_ids(),
            [0, 1, 2, 3, 7, 9]
        );
        let stepped = ArraySpec::parse("0-1000:2%4").unwrap();
        assert_eq!(stepped.task_ids().len(), 501);
        assert_eq!(stepped.task_ids()[1], 2);
        assert_eq!(stepped.throttle, Some(4));
        assert_eq!(ArraySpec::parse("1,3%1").unwrap().task_ids(), [1, 3]);
        assert_eq!(ArraySpec::parse("7").unwrap().task_ids(), [7]);
        for bad in ["", "a", "3-1", "1-", "1:0", "1,,2", "1%", "-1", "99999999999"] {
            assert!(ArraySpec::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn a_plan_that_fits_is_one_array_with_task_ids_equal_to_plan_indices() {
        let chunks = split(&[9, 3, 7], limits(1001)).unwrap();
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].offset, 0);
        assert_eq!(chunks[0].spec(Some(2)).to_string(), "3,7,9%2");
        // The largest index allowed is MaxArraySize - 1.
        let chunks = split(&[0, 10], limits(11)).unwrap();
        assert_eq!(chunks.len(), 1);
        assert_eq!(split(&[], limits(11)).unwrap(), vec![]);
    }

    #[test]
    fn a_large_plan_is_cut_into_arrays_with_offsets() {
        let indices: Vec<usize> = (0..25).collect();
        let chunks = split(&indices, limits(11)).unwrap();
        assert_eq!(
            chunks
                .iter()
                .map(|c| (c.offset, c.spec(None).to_string()))
                .collect::<Vec<_>>(),
            vec![
                (0, "0-10".to_string()),
                (11, "0-10".to_string()),
                (22, "0-2".to_string())
            ]
        );
        // A resume of high indices: each chunk starts at its first index.
        let chunks = split(&[3, 12, 13, 40], limits(11)).unwrap();
        assert_eq!(
            chunks
                .iter()
                .map(|c| (c.offset, c.spec(None).to_string()))
                .collect::<Vec<_>>(),
            vec![(3, "0,9-10".to_string()), (40, "0".to_string())]
        );
    }

    #[test]
    fn max_array_tasks_limits_the_count() {
        let limits = ArrayLimits {
            max_array_size: 1001,
            max_array_tasks: Some(4),
        };
        let chunks = split(&(0..10).collect::<Vec<_>>(), limits).unwrap();
        let offsets: Vec<usize> = chunks.iter().map(|c| c.offset).collect();
        assert_eq!(offsets, [0, 4, 8]);
        assert_eq!(chunks[2].task_ids, [0, 1]);
    }

    #[test]
    fn limits_that_allow_no_array_are_errors() {
        assert_eq!(split(&[0], limits(0)), Err(SplitError::ArraysDisabled));
        let none = ArrayLimits {
            max_array_size: 10,
            max_array_tasks: Some(0),
        };
        assert_eq!(split(&[0], none), Err(SplitError::NoTasksAllowed));
    }

    proptest! {
        #[test]
        fn split_covers_every_index_once_within_limits(
            indices in proptest::collection::vec(0usize..5000, 0..300),
            size in 1u32..50,
            tasks in proptest::option::of(1u32..20),
        ) {
            let limits = ArrayLimits { max_array_size: size, max_array_tasks: tasks };
            let chunks = split(&indices, limits).unwrap();
            let mut covered: Vec<usize> = chunks.iter().flat_map(|c| c.plan_indices()).collect();
            let mut expected = indices.clone();
            expected.sort_unstable();
            expected.dedup();
            let sorted_before = covered.clone();
            covered.sort_unstable();
            prop_assert_eq!(&sorted_before, &covered, "chunks are in plan order");
            prop_assert_eq!(covered, expected);
            for c in &chunks {
                prop_assert!(c.task_ids.iter().all(|&t| t < size));
                prop_assert!(tasks.is_none_or(|n| c.task_ids.len() <= n as usize));
                let spec = c.spec(Some(3));
                prop_assert_eq!(ArraySpec::parse(&spec.to_string()).unwrap(), spec);
            }
        }
    }
}
