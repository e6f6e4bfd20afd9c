//! Statistics of the rounds: median and range of a set of values, their formatting, a configuration's pooled
//! attribution error and per-round ratios between two configurations.

use super::{Key, Measured, NFUNC, Results, Sampler, attribution};

/// Median, low and high of a set of values (NaNs dropped).
pub fn spread(v: impl IntoIterator<Item = f64>) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    Some((m, v[0], v[v.len() - 1]))
}

pub(super) fn fmt_spread(s: Option<(f64, f64, f64)>, digits: usize) -> String {
    match s {
        None => "–".into(),
        Some((m, lo, hi)) if (hi - lo).abs() < 1e-9 => format!("{m:.digits$}"),
        Some((m, lo, hi)) => format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})"),
    }
}

pub(super) fn fmt_ns(s: Option<(f64, f64, f64)>) -> String {
    match s {
        None => "–".into(),
        Some((m, lo, hi)) => {
            let f = |x: f64| {
                if x.abs() >= 1e4 {
                    format!("{:.1} µs", x / 1e3)
                } else if x.abs() >= 1e3 {
                    format!("{:.2} µs", x / 1e3)
                } else {
                    format!("{x:.0} ns")
                }
            };
            format!("{} ({}–{})", f(m), f(lo), f(hi))
        }
    }
}

pub(super) fn median_of(v: Option<(f64, f64, f64)>) -> f64 {
    v.map_or(f64::NAN, |x| x.0)
}

impl Results {
    /// Pooled attribution error of a configuration over its rounds: (pp, σ, samples in the hot functions).
    pub fn pooled_error(&self, k: &Key) -> Option<(f64, f64, f64)> {
        let runs = self.runs.get(k)?;
        let mut hot = [0.0; NFUNC];
        let mut truth = [0.0; NFUNC];
        for m in runs {
            for i in 0..NFUNC {
                hot[i] += m.run.hot[i];
                truth[i] += m.run.truth[i];
            }
        }
        let (pp, z) = attribution(&hot, &truth);
        Some((pp, z, hot.iter().sum()))
    }

    /// Per-round ratio of a cost of `a` to the same cost of `b` (same threads, rate, round).
    pub fn ratio(
        &self,
        a: &Key,
        b: &Key,
        cost: impl Fn(&Measured, Sampler) -> f64,
    ) -> Option<(f64, f64, f64)> {
        let (ra, rb) = (self.runs.get(a)?, self.runs.get(b)?);
        spread(
            ra.iter()
                .zip(rb)
                .map(|(x, y)| cost(x, a.sampler) / cost(y, b.sampler)),
        )
    }
}
