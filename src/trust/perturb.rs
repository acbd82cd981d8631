//! Perturbation plans for `probe-check`: which dimensions (`order`, `seed`, `clock`,
//! `concurrency`, `load`, `env`) each run varies, and the concrete values it varies them to, all
//! derived from one seed so a probe is reproducible from its receipt. Run 0 of every probe is the
//! unperturbed reference; each dimension is applied to its own share of the other runs (run i
//! varies dimension `dims[(i - 1) % dims.len()]`), so a verdict that changes can be laid at the
//! door of one dimension. What a dimension can and cannot move is documented in
//! docs/oracle-trust.md; this module only plans, the zone applies.

use crate::receipt::probe::Dimension;
use serde::{Deserialize, Serialize};

/// A `--perturb` value that names no dimension.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown perturbation dimension {0:?}: known are order, seed, clock, concurrency, load, env"
)]
pub struct UnknownDimension(pub String);

/// Parse `--perturb order,seed,...` (duplicates collapse; order of first mention kept).
pub fn parse_dimensions(list: &str) -> Result<Vec<Dimension>, UnknownDimension> {
    let mut dims = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let dim = Dimension::ALL
            .into_iter()
            .find(|d| d.as_str() == name)
            .ok_or_else(|| UnknownDimension(name.to_string()))?;
        if !dims.contains(&dim) {
            dims.push(dim);
        }
    }
    Ok(dims)
}

/// The concrete variation of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPlan {
    pub run: u64,
    /// The dimension this run varies (`None`: the unperturbed reference, or no `--perturb`).
    pub dimension: Option<Dimension>,
    /// Variables set for the check (on top of the exec zone's hermetic environment).
    pub env: Vec<(String, String)>,
    /// A test-order seed, handed to the runner the way it takes one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_seed: Option<u64>,
    /// Offset of the zone's monotonic and boot clocks (time namespace), in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_offset_s: Option<i64>,
    /// Limit the zone to one CPU.
    pub one_cpu: bool,
    /// Busy threads beside the check while it runs (`--isolation none`, where no quota can hold
    /// the check).
    pub load_workers: u32,
    /// The exec zone's CPU quota under load, in percent of one CPU (native isolation: the zone's
    /// cgroup, at most the policy's own `cpu_percent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_quota_percent: Option<u32>,
    /// A suffix that moves the check's working directory to another path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd_suffix: Option<String>,
}

/// A small deterministic generator (SplitMix64): the plan depends on the seed only.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Busy threads of a `load` run without isolation.
pub const LOAD_WORKERS: u32 = 2;
/// The exec zone's CPU quota in a `load` run: a tenth of one CPU, so the check runs about ten
/// times slower and in bursts (10 ms of every 100 ms CFS period), whatever else the host runs.
pub const LOAD_CPU_PERCENT: u32 = 10;

const TIME_ZONES: [&str; 4] = [
    "Pacific/Kiritimati",
    "America/St_Johns",
    "Asia/Kathmandu",
    "Pacific/Pago_Pago",
];
const LOCALES: [&str; 3] = ["C.UTF-8", "POSIX", "C"];

/// Plan `runs` runs varying `dims`, from `seed`.
pub fn plan(runs: u64, dims: &[Dimension], seed: u64) -> Vec<RunPlan> {
    let mut rng = SplitMix64(seed);
    (0..runs)
        .map(|run| {
            let dimension = if run == 0 || dims.is_empty() {
                None
            } else {
                Some(dims[((run - 1) as usize) % dims.len()])
            };
            let mut p = RunPlan {
                run,
                dimension,
                env: Vec::new(),
                order_seed: None,
                clock_offset_s: None,
                one_cpu: false,
                load_workers: 0,
                cpu_quota_percent: None,
                cwd_suffix: None,
            };
            let r = rng.next();
            match dimension {
                None => {}
                Some(Dimension::Order) => {
                    let s = r % 1_000_000_007;
                    p.order_seed = Some(s);
                    p.env.push(("LOOPEXEC_SEED".into(), s.to_string()));
                }
                Some(Dimension::Seed) => {
                    let s = (r % 4_294_967_295).to_string();
                    for var in [
                        "PYTHONHASHSEED",
                        "RANDOM_SEED",
                        "SEED",
                        "FAKER_SEED",
                        "HYPOTHESIS_SEED",
                    ] {
                        p.env.push((var.into(), s.clone()));
                    }
                }
                Some(Dimension::Clock) => {
                    p.env.push((
                        "TZ".into(),
                        TIME_ZONES[(r % TIME_ZONES.len() as u64) as usize].into(),
                    ));
                    // Between one day and a year ahead.
                    p.clock_offset_s = Some(86_400 + (r % (365 * 86_400)) as i64);
                }
                Some(Dimension::Concurrency) => p.one_cpu = true,
                Some(Dimension::Load) => {
                    p.load_workers = LOAD_WORKERS;
                    p.cpu_quota_percent = Some(LOAD_CPU_PERCENT);
                }
                Some(Dimension::Env) => {
                    let locale = LOCALES[(r % LOCALES.len() as u64) as usize];
                    p.env.push(("LANG".into(), locale.into()));
                    p.env.push(("LC_ALL".into(), locale.into()));
                    p.env
                        .push(("HOME".into(), format!("/tmp/home-{:x}", r & 0xffff)));
                    p.cwd_suffix = Some(format!("moved-{:x}", (r >> 16) & 0xffff));
                }
            }
            p
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimensions_parse_in_order_of_mention_without_duplicates() {
        assert_eq!(
            parse_dimensions("clock, order,clock").unwrap(),
            vec![Dimension::Clock, Dimension::Order]
        );
    }

    #[test]
    fn an_unknown_dimension_is_refused_by_name() {
        assert_eq!(
            parse_dimensions("order,moon"),
            Err(UnknownDimension("moon".into()))
        );
    }

    #[test]
    fn run_zero_is_the_unperturbed_reference() {
        let p = plan(3, &[Dimension::Seed], 7);
        assert_eq!(p[0].dimension, None);
        assert!(p[0].env.is_empty());
    }

    #[test]
    fn dimensions_share_the_other_runs_in_turn() {
        let dims = [Dimension::Order, Dimension::Concurrency];
        let got: Vec<Option<Dimension>> = plan(5, &dims, 1).iter().map(|p| p.dimension).collect();
        assert_eq!(
            got,
            vec![
                None,
                Some(Dimension::Order),
                Some(Dimension::Concurrency),
                Some(Dimension::Order),
                Some(Dimension::Concurrency)
            ]
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_plan_and_another_seed_another() {
        let dims = Dimension::ALL;
        assert_eq!(plan(13, &dims, 42), plan(13, &dims, 42));
        assert_ne!(plan(13, &dims, 42), plan(13, &dims, 43));
    }

    #[test]
    fn the_seed_dimension_varies_the_hash_seed() {
        let p = plan(2, &[Dimension::Seed], 9);
        assert!(p[1].env.iter().any(|(k, _)| k == "PYTHONHASHSEED"));
    }

    #[test]
    fn the_load_dimension_plans_a_tenth_of_a_cpu_and_busy_threads() {
        let p = plan(2, &[Dimension::Load], 9);
        assert_eq!((p[1].cpu_quota_percent, p[1].load_workers), (Some(10), 2));
        assert_eq!((p[0].cpu_quota_percent, p[0].load_workers), (None, 0));
    }

    #[test]
    fn the_clock_dimension_moves_the_zone_clock_and_time_zone() {
        let p = plan(2, &[Dimension::Clock], 9);
        assert!(p[1].clock_offset_s.is_some_and(|s| s >= 86_400));
        assert!(p[1].env.iter().any(|(k, _)| k == "TZ"));
    }
}
