//! The comparison's Markdown tables: every configuration's figures, and the ratios against `perf record`.

use std::fmt::Write as _;

use super::stats::{fmt_ns, fmt_spread, median_of, spread};
use super::{Key, Measured, Results, Sampler};

impl Results {
    /// The Markdown tables.
    pub fn tables(&self) -> String {
        let mut s = String::new();
        let threads: Vec<u32> = {
            let mut t: Vec<u32> = self.runs.keys().map(|k| k.threads).collect();
            t.dedup();
            t
        };
        for t in threads {
            let _ = writeln!(
                s,
                "\n### {t} workload thread{}\n",
                if t == 1 { "" } else { "s" }
            );
            s.push_str(
                "| sampler | requested | rate achieved (Hz) | lost | thread cost / sample | consumer or recorder / sample | report / sample | whole job / sample | error pp (pooled; median per run) | error σ (pooled) | start | stop |\n\
                 |---|---|---|---|---|---|---|---|---|---|---|---|\n",
            );
            let mut keys: Vec<&Key> = self.runs.keys().filter(|k| k.threads == t).collect();
            keys.sort_by_key(|k| (k.rate, k.sampler));
            for k in keys {
                let runs = &self.runs[k];
                let lost = if runs.iter().any(|m| m.run.lost.is_none()) {
                    "cannot tell".to_string()
                } else {
                    fmt_spread(spread(runs.iter().filter_map(|m| m.run.lost)), 0)
                };
                let (pp, z, n) = self.pooled_error(k).unwrap_or((f64::NAN, f64::NAN, 0.0));
                let per_run = spread(runs.iter().map(|m| m.run.error_pp()));
                let inproc = matches!(k.sampler, Sampler::Ntprofile | Sampler::NtprofileTask);
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2} (N={:.0}); {} | {:.1} | {} | {} |",
                    k.sampler.name(),
                    if k.sampler.fixed_rate() {
                        "fixed".to_string()
                    } else {
                        k.rate.to_string()
                    },
                    fmt_spread(spread(runs.iter().map(Measured::rate)), 0),
                    lost,
                    fmt_ns(spread(runs.iter().map(Measured::thread_cost))),
                    if matches!(
                        k.sampler,
                        Sampler::Timer | Sampler::Profil | Sampler::Sprofil
                    ) {
                        "none".to_string()
                    } else if inproc {
                        format!(
                            "{}; {:.0} wake-ups",
                            fmt_ns(spread(runs.iter().map(|m| m.side_cost(k.sampler)))),
                            median_of(spread(runs.iter().map(|m| m.run.cons_switches)))
                        )
                    } else {
                        fmt_ns(spread(runs.iter().map(|m| m.side_cost(k.sampler))))
                    },
                    if k.sampler == Sampler::Perf {
                        fmt_ns(spread(runs.iter().map(Measured::report_cost)))
                    } else {
                        "–".into()
                    },
                    fmt_ns(spread(runs.iter().map(Measured::job_cost))),
                    pp,
                    n,
                    fmt_spread(per_run, 2),
                    z,
                    if inproc || k.sampler == Sampler::Timer {
                        fmt_ns(spread(runs.iter().map(|m| m.run.start_ns)))
                    } else {
                        "–".into()
                    },
                    if inproc {
                        fmt_ns(spread(runs.iter().map(|m| m.run.stop_ns)))
                    } else {
                        "–".into()
                    },
                );
            }
        }
        s
    }

    /// The ratio table against `perf record` at every rate both ran.
    pub fn ratios(&self) -> String {
        let mut s = String::from(
            "| threads | rate (Hz) | sampler | thread cost ÷ perf record's | whole job ÷ (perf record + perf report)'s |\n|---|---|---|---|---|\n",
        );
        let mut any = false;
        for k in self.runs.keys() {
            if !matches!(
                k.sampler,
                Sampler::Ntprofile | Sampler::NtprofileTask | Sampler::NtprofRecord
            ) {
                continue;
            }
            let p = Key {
                sampler: Sampler::Perf,
                ..*k
            };
            if !self.runs.contains_key(&p) {
                continue;
            }
            any = true;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                k.threads,
                k.rate,
                k.sampler.name(),
                fmt_spread(self.ratio(k, &p, |m, _| m.thread_cost()), 2),
                fmt_spread(self.ratio(k, &p, |m, _| m.job_cost()), 2),
            );
        }
        if any { s } else { String::new() }
    }
}
