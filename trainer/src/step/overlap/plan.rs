//! Which gradients travel together: buckets in the order backward produces the gradients, as
//! PyTorch's DDP groups them (pure; no I/O).
//!
//! A bucket is a run of whole parameters in that order, up to a cap of bytes (a parameter larger
//! than the cap is a bucket of its own); the first bucket has a smaller cap, so that its
//! all-reduce starts early in backward. The last bucket carries one more element, the control
//! flag the replicas sum (a stop request).

/// PyTorch DDP's first bucket (`dist._DEFAULT_FIRST_BUCKET_BYTES`, 1 MiB).
pub const FIRST_BUCKET_BYTES: usize = 1 << 20;

/// Where each parameter's gradient goes in the buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketPlan {
    /// Per bucket, its parameters (indices into the model's parameter list) in order.
    pub buckets: Vec<Vec<usize>>,
    /// Per bucket, its length in floats (the control element included in the last).
    pub lens: Vec<usize>,
    /// Per parameter: its bucket and its offset there.
    pub place: Vec<(usize, usize)>,
}

impl BucketPlan {
    /// Buckets of the parameters in `order` (every index of `sizes` once; `sizes` are the
    /// parameters' element counts), each at most `cap_bytes` (f32), the first at most
    /// `first_cap_bytes`.
    pub fn new(order: &[usize], sizes: &[usize], cap_bytes: usize, first_cap_bytes: usize) -> Self {
        debug_assert_eq!(order.len(), sizes.len());
        let mut buckets: Vec<Vec<usize>> = Vec::new();
        let mut lens: Vec<usize> = Vec::new();
        let mut place = vec![(0, 0); sizes.len()];
        for &p in order {
            let n = sizes[p];
            // The bucket being filled takes `p` if it is empty or `p` fits under its cap.
            let fits = lens.last().is_some_and(|&len| {
                let cap = if lens.len() == 1 {
                    first_cap_bytes
                } else {
                    cap_bytes
                };
                len == 0 || len + n <= (cap / 4).max(1)
            });
            if !fits {
                buckets.push(Vec::new());
                lens.push(0);
            }
            let b = buckets.len() - 1;
            place[p] = (b, lens[b]);
            buckets[b].push(p);
            lens[b] += n;
        }
        match lens.last_mut() {
            Some(len) => *len += 1,
            None => {
                buckets.push(Vec::new());
                lens.push(1);
            }
        }
        BucketPlan {
            buckets,
            lens,
            place,
        }
    }

    /// Floats in all buckets (the parameters and the control element).
    pub fn total(&self) -> usize {
        self.lens.iter().sum()
    }
}

/// The order to learn from when backward has not told it yet: the reverse of the model's
/// parameter order, which is roughly backward's for a model built front to back.
pub fn reverse_order(params: usize) -> Vec<usize> {
    (0..params).rev().collect()
}

/// `seen` (parameters in the order backward finalized them, each at most once) completed with
/// the parameters it lacks (no gradient seen: unused, or not reached by the hook), in reverse
/// parameter order.
pub fn complete_order(seen: &[usize], params: usize) -> Vec<usize> {
    let mut have = vec![false; params];
    let mut order = Vec::with_capacity(params);
    for &p in seen {
        if p < params && !have[p] {
            have[p] = true;
            order.push(p);
        }
    }
    order.extend((0..params).rev().filter(|&p| !have[p]));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_the_order_and_respect_the_caps() {
        // 5 parameters of 100, 200, 300, 50, 400 floats; order 4 3 2 1 0; cap 400 floats,
        // first bucket 200 floats.
        let sizes = [100, 200, 300, 50, 400];
        let plan = BucketPlan::new(&[4, 3, 2, 1, 0], &sizes, 1600, 800);
        // 400 > first cap: alone; then 50+300 = 350 <= 400; then 200+100; control in the last.
        assert_eq!(plan.buckets, vec![vec![4], vec![3, 2], vec![1, 0]]);
        assert_eq!(plan.lens, vec![400, 350, 301]);
        assert_eq!(plan.place[2], (1, 50));
        assert_eq!(plan.place[0], (2, 200));
        assert_eq!(plan.total(), 1051);
    }

    #[test]
    fn the_first_bucket_is_smaller() {
        let sizes = [10; 8];
        // First cap 20 floats, then 40.
        let plan = BucketPlan::new(&reverse_order(8), &sizes, 160, 80);
        assert_eq!(plan.buckets, vec![vec![7, 6], vec![5, 4, 3, 2], vec![1, 0]]);
    }

    #[test]
    fn a_model_without_parameters_has_the_control_bucket() {
        let plan = BucketPlan::new(&[], &[], 100, 100);
        assert_eq!(plan.lens, vec![1]);
    }

    #[test]
    fn orders_are_completed_with_what_backward_did_not_reach() {
        assert_eq!(complete_order(&[2, 0, 2], 4), vec![2, 0, 3, 1]);
        assert_eq!(complete_order(&[], 3), vec![2, 1, 0]);
    }
}
