//! Whether two drop rates differ by more than chance: the conditional binomial test of two
//! Poisson rates, two-sided.
//!
//! Given `k1` drops in `t1` seconds and `k2` in `t2`, and equal rates (the null hypothesis),
//! `k2` given `k1 + k2` is Binomial(`k1 + k2`, `t2 / (t1 + t2)`). The p-value is the
//! probability, under that binomial, of an outcome no more likely than `k2` (R's `binom.test`
//! and `poisson.test`): computed exactly up to [`EXACT_MAX_N`] drops, with the normal
//! approximation (continuity-corrected) above, where the two agree to a few parts in a
//! thousand at the p-values that decide (1e-4 and above), a few percent in the far tails.

/// The largest number of drops (`k1 + k2`) whose p-value is summed exactly.
pub const EXACT_MAX_N: u64 = 1_000_000;

/// Relative tolerance when comparing probabilities to that of the observed outcome (R's, so
/// that outcomes as likely as it, up to rounding, count as such).
const RELATIVE_TOLERANCE: f64 = 1e-7;

/// Terms smaller than `e^-CUTOFF` times the largest and the observed one are left out of the
/// sums: less than 1e-20 of the result in all.
const CUTOFF: f64 = 50.0;

/// The two-sided p-value of `k2` drops in `t2` seconds against `k1` in `t1`, under equal
/// rates. 1 when there are no drops at all; `t1` and `t2` must be positive.
pub fn rate_test(k1: u64, t1: f64, k2: u64, t2: f64) -> f64 {
    binomial_two_sided(k2, k1.saturating_add(k2), t2 / (t1 + t2))
}

/// The two-sided p-value of `x` successes in `n` trials of probability `p`: the probability
/// of every outcome no more likely than `x`.
pub fn binomial_two_sided(x: u64, n: u64, p: f64) -> f64 {
    if n == 0 || p.is_nan() {
        return 1.0;
    }
    let x = x.min(n);
    if p <= 0.0 {
        return if x == 0 { 1.0 } else { 0.0 };
    }
    if p >= 1.0 {
        return if x == n { 1.0 } else { 0.0 };
    }
    if n > EXACT_MAX_N {
        normal_two_sided(x, n, p)
    } else {
        exact_two_sided(x, n, p)
    }
}

/// The exact sum: every probability relative to the mode's, in logarithms (no term underflows
/// before it is negligible), walking outwards from the mode on both sides.
fn exact_two_sided(x: u64, n: u64, p: f64) -> f64 {
    let odds = (p / (1.0 - p)).ln();
    // ln(P(k + 1) / P(k)) and ln(P(k - 1) / P(k)).
    let up = |k: u64| ((n - k) as f64 / (k + 1) as f64).ln() + odds;
    let down = |k: u64| (k as f64 / (n - k + 1) as f64).ln() - odds;
    let mode = (((n + 1) as f64 * p).floor() as u64).min(n);
    let mut lx = 0.0;
    if x > mode {
        lx = (mode..x).map(up).sum();
    } else if x < mode {
        lx = (x + 1..=mode).rev().map(down).sum();
    }
    let as_likely = lx + RELATIVE_TOLERANCE;
    let floor = lx.min(0.0) - CUTOFF;
    // The mode's term is 1; each side is summed until its terms are negligible.
    let (mut all, mut tail) = (1.0, if 0.0 <= as_likely { 1.0 } else { 0.0 });
    let mut add = |l: f64| {
        let w = l.exp();
        all += w;
        if l <= as_likely {
            tail += w;
        }
    };
    let mut l = 0.0;
    for k in (1..=mode).rev() {
        l += down(k);
        if l < floor {
            break;
        }
        add(l);
    }
    l = 0.0;
    for k in mode..n {
        l += up(k);
        if l < floor {
            break;
        }
        add(l);
    }
    (tail / all).min(1.0)
}

/// The normal approximation with a continuity correction.
fn normal_two_sided(x: u64, n: u64, p: f64) -> f64 {
    let mean = n as f64 * p;
    let sd = (mean * (1.0 - p)).sqrt();
    let z = ((x as f64 - mean).abs() - 0.5).max(0.0) / sd;
    erfc(z / std::f64::consts::SQRT_2).min(1.0)
}

/// The complementary error function, to a relative error below 1.2e-7 (the Chebyshev fit of
/// Numerical Recipes, `erfcc`).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = [
        -1.265_512_23,
        1.000_023_68,
        0.374_091_96,
        0.096_784_18,
        -0.186_288_06,
        0.278_868_07,
        -1.135_203_98,
        1.488_515_87,
        -0.822_152_23,
        0.170_872_77,
    ]
    .iter()
    .rev()
    .fold(0.0, |acc, c| c + t * acc);
    let r = t * (-z * z + poly).exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64, rel: f64) -> bool {
        (got - want).abs() <= rel * want.abs()
    }

    /// p-values computed with exact rational arithmetic (as R's `binom.test` and
    /// `poisson.test` give them).
    #[test]
    fn exact_p_values_match_known_ones() {
        for (x, n, p, want) in [
            (3, 10, 0.5, 0.34375),
            (0, 10, 0.5, 0.001953125),
            (10, 10, 0.5, 0.001953125),
            (5, 10, 0.5, 1.0),
            (2, 12, 1.0 / 3.0, 0.358_845_102_278_522),
        ] {
            let got = binomial_two_sided(x, n, p);
            assert!(close(got, want, 1e-9), "({x}, {n}, {p}): {got} != {want}");
        }
        for (k1, t1, k2, t2, want) in [
            (10, 20.0, 2, 10.0, 0.358_845_102_278_522),
            (50, 10.0, 70, 10.0, 0.082_407_479_327_527),
            (500, 10.0, 560, 10.0, 0.069_909_559_460_269),
            (500, 10.0, 1000, 10.0, 1.113_343_040_124_418e-38),
            (0, 10.0, 7, 5.0, 0.000_457_247_370_827_618),
            (100, 30.0, 40, 10.0, 0.329_675_905_682_983),
            (5, 10.0, 0, 10.0, 0.0625),
        ] {
            let got = rate_test(k1, t1, k2, t2);
            assert!(
                close(got, want, 1e-6),
                "{k1} in {t1}s vs {k2} in {t2}s: {got} != {want}"
            );
        }
    }

    #[test]
    fn no_drops_and_equal_counts_are_no_evidence() {
        assert_eq!(rate_test(0, 10.0, 0, 10.0), 1.0);
        assert_eq!(rate_test(1, 10.0, 1, 10.0), 1.0);
        assert!(rate_test(1000, 10.0, 1000, 10.0) > 0.99);
        // The same rate over different lengths.
        assert!(rate_test(100, 10.0, 300, 30.0) > 0.9);
    }

    #[test]
    fn the_normal_approximation_agrees_with_the_exact_sum_where_it_takes_over() {
        let n = EXACT_MAX_N;
        for dx in [0.0, 200.0, 700.0, 1500.0, 2500.0, -700.0, -2500.0] {
            let x = (n as f64 * 0.3 + dx) as u64;
            let exact = exact_two_sided(x, n, 0.3);
            let normal = normal_two_sided(x, n, 0.3);
            // Skew makes the far tails differ by a few percent; p-values that decide agree.
            let within = if exact > 1e-4 { 5e-3 } else { 5e-2 };
            assert!(
                (exact - normal).abs() <= within * exact,
                "x = {x}: exact {exact}, normal {normal}"
            );
        }
        // Above the threshold: 2,000 more drops of 2,000,000 is no evidence, 20,000 is.
        assert!(rate_test(1_000_000, 10.0, 1_002_000, 10.0) > 0.1);
        assert!(rate_test(1_000_000, 10.0, 1_020_000, 10.0) < 1e-10);
    }

    #[test]
    fn erfc_matches_known_values() {
        for (x, want) in [
            (0.0, 1.0),
            (0.5, 0.479_500_122_186_953),
            (1.0, 0.157_299_207_050_285),
            (2.0, 0.004_677_734_981_047),
            (3.0, 2.209_049_699_858_544e-5),
            (-1.0, 1.842_700_792_949_715),
        ] {
            assert!(close(erfc(x), want, 2e-7), "erfc({x}) = {}", erfc(x));
        }
    }

    #[test]
    fn far_tails_are_tiny_not_nan() {
        let p = rate_test(0, 10.0, 100_000, 10.0);
        assert!((0.0..1e-300).contains(&p), "{p}");
        let p = rate_test(3_000_000, 10.0, 0, 10.0);
        assert!(p.is_finite() && p < 1e-100, "{p}");
    }
}
