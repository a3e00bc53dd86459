//! Random number generators: PyTorch's CPU generator, reproduced bit for bit, and a small
//! counter-based generator for everything that has no PyTorch counterpart.
//!
//! Layout:
//! - [`Mt19937`]: the 32-bit Mersenne Twister exactly as `torch.Generator().manual_seed(s)` seeds it
//!   (`at::mt19937`, i.e. `std::mt19937` seeded with the low 32 bits of `s`).
//! - [`randperm`] / [`randperm_into`]: `torch.randperm(n, generator=g)` on the CPU, same output.
//! - [`SplitMix64`]: a keyed stream (`SplitMix64::keyed(&[seed, epoch, rank, step])`) for data
//!   augmentation and the synthetic data sets, so every value is a pure function of its key and a
//!   resumed run needs no saved RNG state.

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER: u32 = 0x8000_0000;
const LOWER: u32 = 0x7fff_ffff;

/// PyTorch's CPU random engine (`at::mt19937`): the reference MT19937 with `init_genrand` seeding.
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; N],
    next: usize,
}

impl Mt19937 {
    /// Seeds like `torch.Generator().manual_seed(seed)`: only the low 32 bits of `seed` are used.
    pub fn new(seed: u64) -> Self {
        let mut state = [0u32; N];
        state[0] = seed as u32;
        for j in 1..N {
            let prev = state[j - 1];
            state[j] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(j as u32);
        }
        Mt19937 { state, next: N }
    }

    fn twist(&mut self) {
        for i in 0..N {
            let y = (self.state[i] & UPPER) | (self.state[(i + 1) % N] & LOWER);
            let mag = if y & 1 == 1 { MATRIX_A } else { 0 };
            self.state[i] = self.state[(i + M) % N] ^ (y >> 1) ^ mag;
        }
        self.next = 0;
    }

    /// The next 32-bit output (`CPUGeneratorImpl::random()`).
    pub fn next_u32(&mut self) -> u32 {
        if self.next >= N {
            self.twist();
        }
        let mut y = self.state[self.next];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// Two outputs joined as `(first << 32) | second` (`CPUGeneratorImpl::random64()`).
    pub fn next_u64(&mut self) -> u64 {
        let hi = self.next_u32() as u64;
        let lo = self.next_u32() as u64;
        (hi << 32) | lo
    }
}

/// Below this length PyTorch's `randperm_cpu` uses a forward Fisher–Yates on 32-bit draws; from it on,
/// the "inside-out" variant on 64-bit draws (`n < std::numeric_limits<uint32_t>::max() / 20`).
const RANDPERM_SMALL: usize = (u32::MAX / 20) as usize;

/// `torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()`.
pub fn randperm(n: usize, seed: u64) -> Vec<usize> {
    let mut out = Vec::with_capacity(n);
    randperm_into(n, seed, &mut out);
    out
}

/// [`randperm`] into a reused buffer: no allocation once `out` has capacity `n`.
pub fn randperm_into(n: usize, seed: u64, out: &mut Vec<usize>) {
    let mut g = Mt19937::new(seed);
    randperm_with(n, &mut g, out);
}

/// `torch.randperm(n, generator=g)` drawing from an existing generator (as `random_split` does).
pub fn randperm_with(n: usize, g: &mut Mt19937, out: &mut Vec<usize>) {
    out.clear();
    if n < RANDPERM_SMALL {
        out.extend(0..n);
        for i in 0..n.saturating_sub(1) {
            let z = g.next_u32() as usize % (n - i);
            out.swap(i, z + i);
        }
    } else {
        out.resize(n, 0);
        for i in 0..n {
            let z = (g.next_u64() % (i as u64 + 1)) as usize;
            out[i] = out[z];
            out[z] = i;
        }
    }
}

/// The SplitMix64 finaliser: a bijective 64-bit mix.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// A small, fast generator whose stream is a pure function of a key (counter-based use).
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
    spare: Option<f64>,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 {
            state: seed,
            spare: None,
        }
    }

    /// A stream keyed by several counters, e.g. `[seed, epoch, rank, step, sample]`; keys that differ
    /// in any part (or in order) give unrelated streams.
    pub fn keyed(parts: &[u64]) -> Self {
        let mut s = GOLDEN;
        for &p in parts {
            s = mix64(s ^ mix64(p.wrapping_add(GOLDEN)));
        }
        SplitMix64::new(s)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix64(self.state)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (multiply-shift; the bias is below 2^-64 · n). `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// A fair coin.
    pub fn coin(&mut self) -> bool {
        self.next_u64() >> 63 == 1
    }

    /// Standard normal (Box–Muller; the second value of each pair is kept for the next call).
    pub fn normal(&mut self) -> f64 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        let u1 = 1.0 - self.next_f64(); // (0, 1]: ln is finite
        let u2 = self.next_f64();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
        self.spare = Some(r * s);
        r * c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_matches_reference_outputs() {
        // std::mt19937 default seed 5489: the 10000th output is 4123659995 (C++ standard, [rand.predef]).
        let mut g = Mt19937::new(5489);
        assert_eq!(g.next_u32(), 3_499_211_612);
        for _ in 1..9999 {
            g.next_u32();
        }
        assert_eq!(g.next_u32(), 4_123_659_995);
        // Only the low 32 bits of the seed count, as in at::mt19937.
        let (mut a, mut b) = (Mt19937::new(7), Mt19937::new(7 + (1u64 << 32)));
        assert_eq!(a.next_u64(), b.next_u64());
    }

    #[test]
    fn random64_joins_two_draws_high_first() {
        let mut a = Mt19937::new(3);
        let mut b = Mt19937::new(3);
        let hi = a.next_u32() as u64;
        let lo = a.next_u32() as u64;
        assert_eq!(b.next_u64(), (hi << 32) | lo);
    }

    /// Expected values from `torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()`,
    /// produced by torch 2.15.0 (CPU).
    #[test]
    fn randperm_matches_pytorch() {
        let cases: [(usize, u64, &[usize]); 7] = [
            (1, 0, &[0]),
            (2, 0, &[0, 1]),
            (5, 0, &[4, 0, 1, 3, 2]),
            (10, 0, &[4, 1, 7, 5, 3, 9, 0, 8, 6, 2]),
            (10, 1, &[5, 6, 1, 2, 0, 8, 9, 3, 7, 4]),
            (10, 42, &[2, 6, 1, 8, 4, 5, 0, 9, 3, 7]),
            (
                17,
                3,
                &[16, 9, 1, 14, 4, 5, 6, 12, 15, 7, 0, 3, 2, 11, 13, 10, 8],
            ),
        ];
        for (n, seed, want) in cases {
            assert_eq!(randperm(n, seed), want, "randperm({n}, seed {seed})");
        }
        let p100: [usize; 100] = [
            15, 59, 71, 57, 2, 27, 87, 54, 36, 96, 98, 76, 28, 43, 8, 80, 58, 91, 61, 25, 56, 5,
            99, 9, 60, 93, 95, 42, 70, 3, 31, 53, 92, 81, 26, 14, 24, 35, 83, 41, 1, 64, 68, 37,
            52, 23, 0, 29, 32, 34, 40, 75, 6, 10, 86, 97, 39, 89, 62, 12, 90, 79, 4, 48, 45, 85,
            38, 33, 78, 84, 67, 50, 16, 51, 73, 63, 17, 46, 65, 66, 11, 22, 47, 7, 49, 94, 69, 21,
            74, 82, 72, 55, 30, 44, 18, 88, 77, 13, 20, 19,
        ];
        assert_eq!(randperm(100, 7), p100);
        let p = randperm(1000, 123);
        assert_eq!(
            &p[..16],
            &[
                382, 974, 946, 31, 512, 42, 918, 564, 827, 227, 261, 737, 322, 710, 502, 309
            ]
        );
        assert_eq!(&p[992..], &[529, 206, 217, 473, 400, 536, 156, 290]);
    }

    #[test]
    fn randperm_is_a_permutation_and_reuses_the_buffer() {
        let mut out = Vec::new();
        for n in [0usize, 1, 2, 17, 1000] {
            randperm_into(n, 42, &mut out);
            let mut sorted = out.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>());
        }
        let cap = out.capacity();
        let ptr = out.as_ptr();
        randperm_into(500, 1, &mut out);
        assert_eq!((out.capacity(), out.as_ptr()), (cap, ptr));
    }

    #[test]
    fn splitmix_streams_are_keyed() {
        let a: Vec<u64> = (0..4)
            .map(|_| SplitMix64::keyed(&[1, 2, 3]).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let x = SplitMix64::keyed(&[1, 2, 3]).next_u64();
        assert_ne!(x, SplitMix64::keyed(&[1, 3, 2]).next_u64());
        assert_ne!(x, SplitMix64::keyed(&[1, 2, 4]).next_u64());
        assert_ne!(x, SplitMix64::keyed(&[1, 2]).next_u64());
        let mut g = SplitMix64::new(9);
        let n = 20_000;
        let (mut sum, mut sq) = (0.0, 0.0);
        for _ in 0..n {
            let v = g.normal();
            sum += v;
            sq += v * v;
        }
        let mean = sum / n as f64;
        let var = sq / n as f64 - mean * mean;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "mean {mean} var {var}"
        );
        assert!((0..1000).all(|_| g.below(7) < 7));
    }
}
