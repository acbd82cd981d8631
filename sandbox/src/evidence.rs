//! Enforcement evidence: what the kernel applied to a zone's command, read back rather than
//! assumed. The command reads it itself from inside the zone, after its last protection (the
//! seccomp filter) and just before its execve ([`read_in_zone`]: a few /proc reads, no extra
//! process): the ids of its namespaces, its uid/gid maps, NoNewPrivs, the seccomp mode and filter
//! count and the capability sets of /proc/self/status, the kernel's Landlock ABI and the status of
//! the ruleset it enforced, the digests of the Landlock rules and the seccomp programs it
//! installed. The zone init forwards that [`Readback`] with `Ready`; the supervisor completes it
//! ([`complete`]) with its own namespace ids (so that "new" is proven, not claimed) and the zone
//! cgroup's limits read from the cgroup's files, into the [`Enforcement`] the receipt records.
//!
//! Every read is bounded and every parse total: odd or missing content leaves a field `None` and
//! names what could not be read in `unread`; nothing here panics.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The namespaces of /proc/self/ns read back, in this order.
pub const NAMESPACE_KINDS: [&str; 8] =
    ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time"];

/// Most bytes read from one /proc or cgroup file.
const MAX_FILE: u64 = 64 * 1024;
/// Most id map lines kept (the kernel allows 340; a zone has one).
const MAX_MAP_LINES: usize = 16;
/// Most characters kept of one cgroup limit value or one `unread` note.
const MAX_VALUE: usize = 200;

/// What the Landlock ruleset the command enforced was (see `landlock_rules::restrict`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockApplied {
    /// The ABI the ruleset was built for.
    pub abi: u32,
    /// The kernel's answer to `landlock_restrict_self`: `fully_enforced` or `partially_enforced`.
    pub status: String,
    /// Rules added (paths beneath, network ports).
    pub rules: u32,
    /// SHA-256 of the ruleset as built: one line per handled access set, scope and added rule.
    pub rules_sha256: String,
}

/// SHA-256 over the lines describing a ruleset, each ended by a newline.
pub(crate) fn lines_sha256(lines: &[String]) -> String {
    let mut h = Sha256::new();
    for l in lines {
        h.update(l.as_bytes());
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}

/// The seccomp programs as installed, in order: count, instructions, SHA-256 of their bytes
/// (each instruction as `code` (u16 LE), `jt`, `jf`, `k` (u32 LE)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompPrograms {
    pub programs: u32,
    pub instructions: u32,
    pub sha256: String,
}

pub(crate) fn seccomp_programs(programs: &[seccompiler::BpfProgram]) -> SeccompPrograms {
    let mut h = Sha256::new();
    let mut instructions = 0u32;
    for p in programs {
        for i in p {
            h.update(i.code.to_le_bytes());
            h.update([i.jt, i.jf]);
            h.update(i.k.to_le_bytes());
            instructions = instructions.saturating_add(1);
        }
    }
    SeccompPrograms {
        programs: programs.len() as u32,
        instructions,
        sha256: hex::encode(h.finalize()),
    }
}

/// The fields of /proc/self/status the evidence keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusFields {
    pub no_new_privs: Option<u32>,
    /// 0 off, 1 strict, 2 filter.
    pub seccomp: Option<u32>,
    pub seccomp_filters: Option<u32>,
    pub cap_inh: Option<u64>,
    pub cap_prm: Option<u64>,
    pub cap_eff: Option<u64>,
    pub cap_bnd: Option<u64>,
    pub cap_amb: Option<u64>,
}

/// Parse the kept fields of /proc/<pid>/status text (unknown lines and bad values skipped).
pub fn parse_status(text: &str) -> StatusFields {
    let mut s = StatusFields::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let dec = || value.parse::<u32>().ok();
        let hex = || u64::from_str_radix(value, 16).ok();
        match key {
            "NoNewPrivs" => s.no_new_privs = dec(),
            "Seccomp" => s.seccomp = dec(),
            "Seccomp_filters" => s.seccomp_filters = dec(),
            "CapInh" => s.cap_inh = hex(),
            "CapPrm" => s.cap_prm = hex(),
            "CapEff" => s.cap_eff = hex(),
            "CapBnd" => s.cap_bnd = hex(),
            "CapAmb" => s.cap_amb = hex(),
            _ => {}
        }
    }
    s
}

/// One line of a uid_map or gid_map: `count` ids from `inside` map to `outside`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMapLine {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

/// Parse /proc/<pid>/uid_map (or gid_map) text: at most `MAX_MAP_LINES` lines of three numbers;
/// `None` when any line is not three numbers.
pub fn parse_id_map(text: &str) -> Option<Vec<IdMapLine>> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let n: Vec<u32> = line
            .split_whitespace()
            .map(|w| w.parse().ok())
            .collect::<Option<_>>()?;
        let [inside, outside, count] = n[..] else {
            return None;
        };
        if out.len() == MAX_MAP_LINES {
            return None;
        }
        out.push(IdMapLine {
            inside,
            outside,
            count,
        });
    }
    Some(out)
}

/// The inode number of a namespace link's target (`user:[4026531837]`).
pub fn parse_ns_link(link: &str) -> Option<u64> {
    let inner = link.split_once(":[")?.1.strip_suffix(']')?;
    inner.parse().ok()
}

/// What the command read of itself, inside the zone, just before its execve.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readback {
    /// Namespace kind -> inode of /proc/self/ns/<kind> (absent: unreadable, see `unread`).
    pub namespaces: BTreeMap<String, u64>,
    pub uid_map: Option<Vec<IdMapLine>>,
    pub gid_map: Option<Vec<IdMapLine>>,
    pub status: StatusFields,
    /// The kernel's Landlock ABI as the command sees it (0: none).
    pub landlock_kernel_abi: u32,
    /// The ruleset the command enforced; None when the layer was skipped.
    pub landlock: Option<LandlockApplied>,
    pub seccomp: Option<SeccompPrograms>,
    /// /proc/self/cgroup as the zone sees it (through its cgroup namespace), at most 32 lines.
    #[serde(default)]
    pub cgroup: Vec<String>,
    /// What could not be read, and why.
    pub unread: Vec<String>,
}

fn bounded(s: String) -> String {
    if s.chars().count() <= MAX_VALUE {
        return s;
    }
    s.chars().take(MAX_VALUE).collect::<String>() + "..."
}

fn read_text(path: &Path) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_FILE)
        .read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Namespace kind -> inode for /proc/<who>/ns/*; unreadable ones named in `unread`.
fn namespace_ids(who: &str, unread: &mut Vec<String>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for kind in NAMESPACE_KINDS {
        let path = format!("/proc/{who}/ns/{kind}");
        match std::fs::read_link(&path) {
            Ok(target) => match parse_ns_link(&target.to_string_lossy()) {
                Some(id) => {
                    out.insert(kind.to_string(), id);
                }
                None => unread.push(bounded(format!("{path}: unexpected link {target:?}"))),
            },
            // A kernel without time namespaces has no ns/time: not an error of the zone.
            Err(e) if kind == "time" && e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => unread.push(bounded(format!("{path}: {e}"))),
        }
    }
    out
}

/// Zone side, in the command after its seccomp filter is installed: read back what it runs with.
pub(crate) fn read_in_zone(
    landlock: Option<LandlockApplied>,
    seccomp: SeccompPrograms,
) -> Readback {
    let mut unread = Vec::new();
    let namespaces = namespace_ids("self", &mut unread);
    let mut map = |file: &str| match read_text(Path::new(file)) {
        Ok(t) => {
            let parsed = parse_id_map(&t);
            if parsed.is_none() {
                unread.push(format!(
                    "{file}: not a map of at most {MAX_MAP_LINES} lines"
                ));
            }
            parsed
        }
        Err(e) => {
            unread.push(bounded(format!("{file}: {e}")));
            None
        }
    };
    let uid_map = map("/proc/self/uid_map");
    let gid_map = map("/proc/self/gid_map");
    let status = match read_text(Path::new("/proc/self/status")) {
        Ok(t) => parse_status(&t),
        Err(e) => {
            unread.push(bounded(format!("/proc/self/status: {e}")));
            StatusFields::default()
        }
    };
    let cgroup = match read_text(Path::new("/proc/self/cgroup")) {
        Ok(t) => t.lines().take(32).map(|l| bounded(l.to_string())).collect(),
        Err(e) => {
            unread.push(bounded(format!("/proc/self/cgroup: {e}")));
            Vec::new()
        }
    };
    Readback {
        cgroup,
        namespaces,
        uid_map,
        gid_map,
        status,
        landlock_kernel_abi: crate::sys::landlock_abi(),
        landlock,
        seccomp: Some(seccomp),
        unread,
    }
}

/// One namespace of the zone against the supervisor's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceEvidence {
    pub zone: u64,
    pub supervisor: Option<u64>,
    /// The zone's differs from the supervisor's (false when the supervisor's is unknown).
    pub new: bool,
}

/// The zone cgroup as its files show it, read by the supervisor right after `Ready`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupEvidence {
    /// The zone cgroup's directories (one on v2, one per controller on v1).
    pub dirs: Vec<PathBuf>,
    /// The zone's command was in every one of these directories just before its execve: its
    /// /proc/self/cgroup (`zone_view`) names each directory's leaf, or (v2, one directory) is the
    /// root of the cgroup namespace it was cloned into there.
    pub member: bool,
    /// The zone's /proc/self/cgroup, read from inside.
    #[serde(default)]
    pub zone_view: Vec<String>,
    /// Limit file name -> its content (`memory.max`, `pids.max`, `cpu.max`, `memory.swap.max`;
    /// v1: `memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`, `pids.max`,
    /// `cpu.cfs_quota_us`, `cpu.cfs_period_us`), for the files the cgroup has.
    pub limits: BTreeMap<String, String>,
}

/// What the kernel applied to a zone's command, as read back (docs/zones.md, "Enforcement
/// evidence"); in the receipt as the `enforcement` of `exec_result` and `check_result`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    #[serde(default)]
    pub namespaces: BTreeMap<String, NamespaceEvidence>,
    #[serde(default)]
    pub uid_map: Option<Vec<IdMapLine>>,
    #[serde(default)]
    pub gid_map: Option<Vec<IdMapLine>>,
    #[serde(default)]
    pub no_new_privs: Option<u32>,
    #[serde(default)]
    pub seccomp_mode: Option<u32>,
    #[serde(default)]
    pub seccomp_filters: Option<u32>,
    #[serde(default)]
    pub seccomp_programs: Option<SeccompPrograms>,
    #[serde(default)]
    pub capabilities: Capabilities,
    #[serde(default)]
    pub landlock_kernel_abi: u32,
    #[serde(default)]
    pub landlock: Option<LandlockApplied>,
    #[serde(default)]
    pub cgroup: Option<CgroupEvidence>,
    #[serde(default)]
    pub unread: Vec<String>,
}

/// The capability sets of /proc/self/status, as numbers (bit n: capability n).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    pub effective: Option<u64>,
    pub permitted: Option<u64>,
    pub inheritable: Option<u64>,
    pub bounding: Option<u64>,
    pub ambient: Option<u64>,
}

impl Enforcement {
    /// The namespace kinds that are not proven new (the time namespace only counts when the
    /// zone has a clock offset; the caller decides).
    pub fn shared_namespaces(&self) -> Vec<&str> {
        self.namespaces
            .iter()
            .filter(|(_, n)| !n.new)
            .map(|(k, _)| k.as_str())
            .collect()
    }

    /// Every capability set read back and empty.
    pub fn capabilities_empty(&self) -> bool {
        let c = &self.capabilities;
        [
            c.effective,
            c.permitted,
            c.inheritable,
            c.bounding,
            c.ambient,
        ]
        .iter()
        .all(|s| *s == Some(0))
    }
}

/// The supervisor's own namespaces, read once per process.
fn supervisor_namespaces() -> &'static (BTreeMap<String, u64>, Vec<String>) {
    static OURS: std::sync::OnceLock<(BTreeMap<String, u64>, Vec<String>)> =
        std::sync::OnceLock::new();
    OURS.get_or_init(|| {
        let mut unread = Vec::new();
        let ids = namespace_ids("self", &mut unread);
        (ids, unread)
    })
}

const CGROUP_LIMIT_FILES: [&str; 8] = [
    "memory.max",
    "memory.swap.max",
    "pids.max",
    "cpu.max",
    "memory.limit_in_bytes",
    "memory.memsw.limit_in_bytes",
    "cpu.cfs_quota_us",
    "cpu.cfs_period_us",
];

/// Whether the zone's view of its cgroups (`/proc/self/cgroup` lines) places it in every one of
/// `dirs`: a line whose path ends with the directory's leaf name, or, for a single (v2)
/// directory, the unified line at its namespace's root.
pub fn in_cgroups(zone_view: &[String], dirs: &[PathBuf]) -> bool {
    let paths: Vec<&str> = zone_view
        .iter()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .collect();
    !dirs.is_empty()
        && dirs.iter().all(|dir| {
            let leaf = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            let named = leaf.is_some_and(|leaf| {
                paths
                    .iter()
                    .any(|p| p.rsplit('/').next() == Some(leaf.as_str()))
            });
            named || (dirs.len() == 1 && zone_view.iter().any(|l| l == "0::/"))
        })
}

/// The zone cgroup's limit files, and whether the zone's own view places it there.
pub(crate) fn read_cgroup(
    dirs: &[PathBuf],
    zone_view: Vec<String>,
    unread: &mut Vec<String>,
) -> CgroupEvidence {
    let mut limits = BTreeMap::new();
    let member = in_cgroups(&zone_view, dirs);
    for dir in dirs {
        for file in CGROUP_LIMIT_FILES {
            let path = dir.join(file);
            match read_text(&path) {
                Ok(t) => {
                    limits.insert(file.to_string(), bounded(t.trim().to_string()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => unread.push(bounded(format!("{}: {e}", path.display()))),
            }
        }
    }
    CgroupEvidence {
        dirs: dirs.to_vec(),
        member,
        zone_view,
        limits,
    }
}

/// Supervisor side, on `Ready`: the zone's readback against our namespaces, with its cgroup's
/// files (`cgroup_dirs` empty: no cgroup, the layer skipped).
pub(crate) fn complete(zone: Readback, cgroup_dirs: &[PathBuf]) -> Enforcement {
    let (ours, our_unread) = supervisor_namespaces();
    let mut unread = zone.unread;
    unread.extend(our_unread.iter().map(|u| format!("supervisor {u}")));
    let namespaces = zone
        .namespaces
        .into_iter()
        .map(|(kind, id)| {
            let supervisor = ours.get(&kind).copied();
            let new = supervisor.is_some_and(|s| s != id);
            (
                kind,
                NamespaceEvidence {
                    zone: id,
                    supervisor,
                    new,
                },
            )
        })
        .collect();
    let cgroup = (!cgroup_dirs.is_empty())
        .then(|| read_cgroup(cgroup_dirs, zone.cgroup.clone(), &mut unread));
    let s = zone.status;
    Enforcement {
        namespaces,
        uid_map: zone.uid_map,
        gid_map: zone.gid_map,
        no_new_privs: s.no_new_privs,
        seccomp_mode: s.seccomp,
        seccomp_filters: s.seccomp_filters,
        seccomp_programs: zone.seccomp,
        capabilities: Capabilities {
            effective: s.cap_eff,
            permitted: s.cap_prm,
            inheritable: s.cap_inh,
            bounding: s.cap_bnd,
            ambient: s.cap_amb,
        },
        landlock_kernel_abi: zone.landlock_kernel_abi,
        landlock: zone.landlock,
        cgroup,
        unread,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tsh\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t3\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n";

    #[test]
    fn status_fields_parse_decimal_and_hex_values() {
        let s = parse_status(STATUS);
        assert_eq!(s.no_new_privs, Some(1));
        assert_eq!(s.seccomp, Some(2));
        assert_eq!(s.seccomp_filters, Some(3));
        assert_eq!(s.cap_eff, Some(0));
        assert_eq!(s.cap_bnd, Some(0x1ff_ffff_ffff));
    }

    #[test]
    fn odd_status_content_leaves_fields_unset_without_panicking() {
        let s = parse_status("NoNewPrivs:\tyes\nCapEff:\tzz\n:::\n\u{0}\nSeccomp");
        assert_eq!(s, StatusFields::default());
    }

    #[test]
    fn an_id_map_of_three_numbers_per_line_parses() {
        assert_eq!(
            parse_id_map("         0       1000          1\n"),
            Some(vec![IdMapLine {
                inside: 0,
                outside: 1000,
                count: 1
            }])
        );
    }

    #[test]
    fn an_id_map_with_a_bad_line_or_too_many_lines_is_none() {
        assert_eq!(parse_id_map("0 1000\n"), None);
        assert_eq!(parse_id_map("0 x 1\n"), None);
        assert_eq!(parse_id_map(&"1 1 1\n".repeat(MAX_MAP_LINES + 1)), None);
    }

    #[test]
    fn a_namespace_link_gives_its_inode_and_odd_links_none() {
        assert_eq!(parse_ns_link("user:[4026531837]"), Some(4026531837));
        assert_eq!(parse_ns_link("user:4026531837"), None);
        assert_eq!(parse_ns_link("user:[x]"), None);
    }

    #[test]
    fn the_seccomp_digest_covers_every_instruction_in_order() {
        let a = crate::seccomp_filter::build(&[]).unwrap();
        let b = crate::seccomp_filter::build(&["memfd_create".to_string()]).unwrap();
        let (da, db) = (seccomp_programs(&a), seccomp_programs(&b));
        assert_eq!(da.programs, 3);
        assert_eq!(da, seccomp_programs(&a));
        assert_ne!(da.sha256, db.sha256);
        let mut reversed = a.clone();
        reversed.reverse();
        assert_ne!(da.sha256, seccomp_programs(&reversed).sha256);
    }

    #[test]
    fn a_zone_is_in_its_cgroups_when_its_view_names_each_leaf_or_is_its_v2_namespace_root() {
        let v1 = [
            PathBuf::from("/sys/fs/cgroup/memory/a/loopexec-zone-7-0"),
            PathBuf::from("/sys/fs/cgroup/pids/loopexec-zone-7-0"),
        ];
        let view = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
        assert!(in_cgroups(
            &view(&["5:memory:/loopexec-zone-7-0", "3:pids:/loopexec-zone-7-0"]),
            &v1
        ));
        assert!(!in_cgroups(&view(&["5:memory:/", "3:pids:/"]), &v1));
        let v2 = [PathBuf::from("/sys/fs/cgroup/x/loopexec-zone-7-0")];
        assert!(in_cgroups(&view(&["0::/"]), &v2));
        assert!(!in_cgroups(&view(&["0::/"]), &[]));
        assert!(!in_cgroups(&view(&["garbage"]), &v2));
    }

    #[test]
    fn a_namespace_is_new_only_when_it_differs_from_the_supervisors() {
        let ours = supervisor_namespaces().0.clone();
        let mut namespaces = ours.clone();
        namespaces.insert("user".into(), 1);
        let zone = Readback {
            namespaces,
            ..Default::default()
        };
        let e = complete(zone, &[]);
        assert!(e.namespaces["user"].new);
        assert!(!e.namespaces["net"].new);
        assert_eq!(e.namespaces["net"].supervisor, ours.get("net").copied());
        assert_eq!(e.cgroup, None);
    }
}
