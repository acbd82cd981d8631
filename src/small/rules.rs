//! The strict validation of a SMALL v1.0.0 workspace (docs/task-list.md lists the rules): the shape
//! of each file (unknown keys invalid), owner and quoted version, non-empty intent and
//! constraints, task statuses, duplicate ids, unknown dependencies and cycles, progress timestamps
//! and evidence, S1-S4, secret-looking keys or values, `http://` links. Every violation names its
//! rule, file and key.

use super::yaml::{Kind, Node, Value};
use super::{
    replay, Violation, Workspace, CONSTRAINTS, HANDOFF, INTENT, PLAN, PROGRESS, SMALL_VERSION,
    WORKSPACE,
};
use std::collections::{HashMap, HashSet};

struct Check<'a> {
    out: &'a mut Vec<Violation>,
    file: &'static str,
}

fn at(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

fn idx(base: &str, i: usize) -> String {
    format!("{base}[{i}]")
}

impl Check<'_> {
    fn v(&mut self, rule: &'static str, key: &str, message: impl Into<String>) {
        self.out.push(Violation {
            rule,
            file: self.file.to_string(),
            key: key.to_string(),
            message: message.into(),
        });
    }

    /// A mapping with only `allowed` keys and every `required` one; false if not a mapping.
    fn keys(&mut self, node: &Node, path: &str, allowed: &[&str], required: &[&str]) -> bool {
        let Some(pairs) = node.pairs() else {
            let what = if path.is_empty() { "the file" } else { "value" };
            self.v("schema", path, format!("{what} must be a mapping"));
            return false;
        };
        for (k, _) in pairs {
            if !allowed.contains(&k.as_str()) {
                self.v("schema", &at(path, k), "unknown key");
            }
        }
        for r in required {
            if node.get(r).is_none() {
                self.v("schema", &at(path, r), "required key is missing");
            }
        }
        true
    }

    /// A string (optionally non-empty under `empty_rule`); false when absent or wrong.
    fn string(&mut self, node: Option<&Node>, path: &str, empty_rule: Option<&'static str>) {
        let Some(node) = node else { return };
        match node.as_str() {
            None => self.v("schema", path, "must be a string"),
            Some(s) if s.trim().is_empty() => {
                if let Some(rule) = empty_rule {
                    self.v(rule, path, "must not be empty")
                }
            }
            Some(_) => {}
        }
    }

    fn strings(&mut self, node: Option<&Node>, path: &str) {
        let Some(node) = node else { return };
        match node.items() {
            None => self.v("schema", path, "must be a list of strings"),
            Some(items) => {
                for (i, item) in items.iter().enumerate() {
                    if item.as_str().is_none() {
                        self.v("schema", &idx(path, i), "must be a string");
                    }
                }
            }
        }
    }

    fn one_of(&mut self, node: Option<&Node>, path: &str, values: &[&str], rule: &'static str) {
        let Some(node) = node else { return };
        match node.as_str() {
            Some(s) if values.contains(&s) => {}
            _ => self.v(rule, path, format!("must be one of {}", values.join(", "))),
        }
    }

    fn pattern(&mut self, node: Option<&Node>, path: &str, ok: fn(&str) -> bool, what: &str) {
        let Some(node) = node else { return };
        if !node.as_str().is_some_and(ok) {
            self.v("schema", path, format!("must be {what}"));
        }
    }

    /// `small_version: "1.0.0"` (a quoted string) and, when there is an owner, `owner`.
    fn header(&mut self, root: &Node, owner: &str) {
        match root.get("small_version") {
            Some(v)
                if v.scalar()
                    .is_some_and(|s| s.quoted && s.value == SMALL_VERSION) => {}
            Some(_) => self.v(
                "small_version",
                "small_version",
                format!("must be the quoted string \"{SMALL_VERSION}\""),
            ),
            None => {}
        }
        // A missing owner where one is required is a missing key (`schema`), reported by `keys`.
        if let Some(o) = root.get("owner") {
            if o.as_str() != Some(owner) {
                self.v("owner", "owner", format!("must be {owner:?}"));
            }
        }
    }
}

fn hex64(s: &str) -> bool {
    replay::is_replay_id(s)
}

fn lower_hex(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Every broken rule of the workspace.
pub(crate) fn check(ws: &Workspace) -> Vec<Violation> {
    let mut out = ws.disk.clone();
    if let Some(root) = ws.root(INTENT) {
        intent(
            &mut Check {
                out: &mut out,
                file: INTENT,
            },
            root,
        );
    }
    if let Some(root) = ws.root(CONSTRAINTS) {
        constraints(
            &mut Check {
                out: &mut out,
                file: CONSTRAINTS,
            },
            root,
        );
    }
    if let Some(root) = ws.root(PLAN) {
        plan(
            &mut Check {
                out: &mut out,
                file: PLAN,
            },
            root,
        );
    }
    if let Some(root) = ws.root(PROGRESS) {
        progress(
            &mut Check {
                out: &mut out,
                file: PROGRESS,
            },
            root,
        );
    }
    if let Some(root) = ws.root(HANDOFF) {
        handoff(
            &mut Check {
                out: &mut out,
                file: HANDOFF,
            },
            root,
        );
    }
    if let Some(root) = ws.root(WORKSPACE) {
        workspace(
            &mut Check {
                out: &mut out,
                file: WORKSPACE,
            },
            root,
        );
    }
    cross_file(ws, &mut out);
    for (name, file) in &ws.files {
        hygiene(
            &mut Check {
                out: &mut out,
                file: name,
            },
            &file.root,
            "",
        );
    }
    out
}

fn intent(c: &mut Check, root: &Node) {
    let keys = [
        "small_version",
        "owner",
        "intent",
        "scope",
        "success_criteria",
    ];
    if !c.keys(root, "", &keys, &keys) {
        return;
    }
    c.header(root, "human");
    c.string(root.get("intent"), "intent", Some("non_empty"));
    if let Some(scope) = root.get("scope") {
        if c.keys(
            scope,
            "scope",
            &["include", "exclude"],
            &["include", "exclude"],
        ) {
            c.strings(scope.get("include"), "scope.include");
            c.strings(scope.get("exclude"), "scope.exclude");
        }
    }
    c.strings(root.get("success_criteria"), "success_criteria");
}

fn constraints(c: &mut Check, root: &Node) {
    let keys = ["small_version", "owner", "constraints"];
    if !c.keys(root, "", &keys, &keys) {
        return;
    }
    c.header(root, "human");
    let Some(list) = root.get("constraints") else {
        return;
    };
    let Some(items) = list.items() else {
        return c.v("schema", "constraints", "must be a list");
    };
    if items.is_empty() {
        c.v(
            "non_empty",
            "constraints",
            "at least one constraint is required",
        );
    }
    let mut seen = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let path = idx("constraints", i);
        let keys = ["id", "rule", "severity"];
        if !c.keys(item, &path, &keys, &keys) {
            continue;
        }
        c.string(item.get("id"), &at(&path, "id"), Some("schema"));
        c.string(item.get("rule"), &at(&path, "rule"), Some("schema"));
        c.one_of(
            item.get("severity"),
            &at(&path, "severity"),
            &["error", "warn"],
            "schema",
        );
        if let Some(id) = item.get("id").and_then(Node::as_str) {
            if !seen.insert(id) {
                c.v(
                    "duplicate_id",
                    &at(&path, "id"),
                    format!("constraint id {id:?} repeats"),
                );
            }
        }
    }
}

fn plan(c: &mut Check, root: &Node) {
    let keys = ["small_version", "owner", "tasks"];
    if !c.keys(root, "", &keys, &keys) {
        return;
    }
    c.header(root, "agent");
    let Some(list) = root.get("tasks") else {
        return;
    };
    let Some(items) = list.items() else {
        return c.v("schema", "tasks", "must be a list");
    };
    if items.is_empty() {
        c.v("non_empty", "tasks", "at least one task is required");
    }
    let allowed = [
        "id",
        "title",
        "steps",
        "acceptance",
        "status",
        "dependencies",
    ];
    let mut first_at: HashMap<&str, usize> = HashMap::new();
    for (i, t) in items.iter().enumerate() {
        let path = idx("tasks", i);
        if !c.keys(t, &path, &allowed, &["id", "title"]) {
            continue;
        }
        c.string(t.get("id"), &at(&path, "id"), Some("schema"));
        c.string(t.get("title"), &at(&path, "title"), Some("schema"));
        c.strings(t.get("steps"), &at(&path, "steps"));
        if let Some(a) = t.get("acceptance") {
            if a.items().is_some() {
                c.strings(Some(a), &at(&path, "acceptance"));
            } else if a.as_str().is_none() {
                c.v(
                    "schema",
                    &at(&path, "acceptance"),
                    "must be prose (a string or a list of strings)",
                );
            }
        }
        match t.get("status").map(|s| (s, s.value())) {
            None | Some((_, Some(Value::Null))) => {}
            Some((_, Some(Value::Str(s)))) if super::Status::parse(s).is_some() => {}
            Some(_) => c.v(
                "status",
                &at(&path, "status"),
                "must be pending, in_progress, blocked or completed",
            ),
        }
        c.strings(t.get("dependencies"), &at(&path, "dependencies"));
        if let Some(id) = t.get("id").and_then(Node::as_str) {
            if let Some(first) = first_at.get(id) {
                c.v(
                    "duplicate_id",
                    &at(&path, "id"),
                    format!("task id {id:?} is already used by tasks[{first}]"),
                );
            } else {
                first_at.insert(id, i);
            }
        }
    }
    // Dependencies: unknown ids, then cycles (each reported once, at the task that closes it).
    let deps = |t: &Node| -> Vec<String> {
        t.get("dependencies")
            .and_then(Node::items)
            .map(|d| {
                d.iter()
                    .filter_map(|n| n.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut graph: Vec<(String, Vec<String>)> = Vec::new();
    for (i, t) in items.iter().enumerate() {
        let Some(id) = t.get("id").and_then(Node::as_str) else {
            continue;
        };
        let ds = deps(t);
        for d in &ds {
            if !first_at.contains_key(d.as_str()) {
                c.v(
                    "unknown_dependency",
                    &at(&idx("tasks", i), "dependencies"),
                    format!("task {id:?} depends on {d:?}, which is not in the plan"),
                );
            }
        }
        if first_at.get(id) == Some(&i) {
            graph.push((id.to_string(), ds));
        }
    }
    for cycle in cycles(&graph) {
        let i = first_at.get(cycle[0].as_str()).copied().unwrap_or(0);
        c.v(
            "cycle",
            &at(&idx("tasks", i), "dependencies"),
            format!("dependency cycle: {}", cycle.join(" -> ")),
        );
    }
}

/// Every elementary cycle found by a depth-first walk in file order, each once, as the ids along
/// it with the first repeated at the end.
fn cycles(graph: &[(String, Vec<String>)]) -> Vec<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let index: HashMap<&str, usize> = graph
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id.as_str(), i))
        .collect();
    let mut mark = vec![Mark::New; graph.len()];
    let mut found = Vec::new();
    fn walk(
        n: usize,
        graph: &[(String, Vec<String>)],
        index: &HashMap<&str, usize>,
        mark: &mut Vec<Mark>,
        stack: &mut Vec<usize>,
        found: &mut Vec<Vec<String>>,
    ) {
        mark[n] = Mark::Open;
        stack.push(n);
        for d in &graph[n].1 {
            let Some(&m) = index.get(d.as_str()) else {
                continue;
            };
            match mark[m] {
                Mark::New => walk(m, graph, index, mark, stack, found),
                Mark::Open => {
                    let from = stack.iter().position(|&s| s == m).unwrap_or(0);
                    let mut ids: Vec<String> =
                        stack[from..].iter().map(|&s| graph[s].0.clone()).collect();
                    ids.push(graph[m].0.clone());
                    found.push(ids);
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        mark[n] = Mark::Done;
    }
    for n in 0..graph.len() {
        if mark[n] == Mark::New {
            walk(n, graph, &index, &mut mark, &mut Vec::new(), &mut found);
        }
    }
    found
}

/// A progress timestamp: UTC (`Z`), with a fractional part of 1 to 9 digits; as nanoseconds.
pub(crate) fn timestamp_nanos(s: &str) -> Option<i128> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{1,9})Z$")
            .unwrap_or_else(|_| unreachable!("a constant pattern"))
    });
    let caps = re.captures(s)?;
    let n = |i: usize| caps.get(i).and_then(|m| m.as_str().parse::<u32>().ok());
    let month = time::Month::try_from(u8::try_from(n(2)?).ok()?).ok()?;
    let date = time::Date::from_calendar_date(
        i32::try_from(n(1)?).ok()?,
        month,
        u8::try_from(n(3)?).ok()?,
    )
    .ok()?;
    let frac = caps.get(7)?.as_str();
    let nanos: u32 = format!("{frac:0<9}").parse().ok()?;
    let t = time::Time::from_hms_nano(
        u8::try_from(n(4)?).ok()?,
        u8::try_from(n(5)?).ok()?,
        u8::try_from(n(6)?).ok()?,
        nanos,
    )
    .ok()?;
    Some(
        time::PrimitiveDateTime::new(date, t)
            .assume_utc()
            .unix_timestamp_nanos(),
    )
}

pub(crate) const ENTRY_KEYS: [&str; 14] = [
    "task_id",
    "timestamp",
    "replayId",
    "status",
    "evidence",
    "verification",
    "test",
    "command",
    "command_summary",
    "command_sha256",
    "command_ref",
    "link",
    "commit",
    "notes",
];

fn progress(c: &mut Check, root: &Node) {
    let keys = ["small_version", "owner", "entries"];
    if !c.keys(root, "", &keys, &keys) {
        return;
    }
    c.header(root, "agent");
    let Some(list) = root.get("entries") else {
        return;
    };
    let Some(items) = list.items() else {
        return c.v("schema", "entries", "must be a list");
    };
    let mut previous: Option<(i128, usize)> = None;
    for (i, e) in items.iter().enumerate() {
        let path = idx("entries", i);
        if !c.keys(e, &path, &ENTRY_KEYS, &["task_id"]) {
            continue;
        }
        c.string(e.get("task_id"), &at(&path, "task_id"), Some("schema"));
        match e.get("timestamp") {
            None => c.v("timestamp", &at(&path, "timestamp"), "every entry needs a timestamp"),
            Some(ts) => match ts.as_str().and_then(timestamp_nanos) {
                None => c.v(
                    "timestamp",
                    &at(&path, "timestamp"),
                    "must be a UTC timestamp with a fractional part, e.g. 2026-01-02T03:04:05.000000001Z",
                ),
                Some(t) => {
                    if let Some((p, pi)) = previous {
                        if t <= p {
                            c.v(
                                "timestamp",
                                &at(&path, "timestamp"),
                                format!("not later than entries[{pi}].timestamp (entries are strictly increasing)"),
                            );
                        }
                    }
                    previous = Some((t, i));
                }
            },
        }
        c.pattern(
            e.get("replayId"),
            &at(&path, "replayId"),
            hex64,
            "64 hex digits",
        );
        c.one_of(
            e.get("status"),
            &at(&path, "status"),
            &[
                "pending",
                "in_progress",
                "completed",
                "blocked",
                "cancelled",
            ],
            "status",
        );
        let mut evidence = false;
        for key in ["evidence", "verification", "test"] {
            let Some(n) = e.get(key) else { continue };
            evidence = true;
            match (&n.kind, n.as_str()) {
                (Kind::Map(_), _) => {}
                (_, Some(s)) if !s.is_empty() => {}
                _ => c.v(
                    "schema",
                    &at(&path, key),
                    "must be a non-empty string or a mapping",
                ),
            }
        }
        if !evidence {
            c.v("evidence", &path, "needs evidence, verification or test");
        }
        for key in ["command", "command_summary", "command_ref"] {
            c.string(e.get(key), &at(&path, key), Some("schema"));
        }
        c.pattern(
            e.get("command_sha256"),
            &at(&path, "command_sha256"),
            |s| lower_hex(s, 64, 64),
            "64 lowercase hex digits",
        );
        c.pattern(
            e.get("commit"),
            &at(&path, "commit"),
            |s| lower_hex(s, 7, 40),
            "7 to 40 lowercase hex digits",
        );
        c.string(e.get("link"), &at(&path, "link"), None);
        c.string(e.get("notes"), &at(&path, "notes"), None);
    }
}

fn handoff(c: &mut Check, root: &Node) {
    let keys = [
        "small_version",
        "owner",
        "summary",
        "resume",
        "links",
        "replayId",
        "run",
    ];
    if !c.keys(root, "", &keys, &keys[..6]) {
        return;
    }
    c.header(root, "agent");
    c.string(root.get("summary"), "summary", Some("non_empty"));
    if let Some(resume) = root.get("resume") {
        if c.keys(
            resume,
            "resume",
            &["current_task_id", "next_steps"],
            &["next_steps"],
        ) {
            c.strings(resume.get("next_steps"), "resume.next_steps");
            match resume.get("current_task_id").and_then(Node::value) {
                None | Some(Value::Null) | Some(Value::Str(_)) => {}
                Some(_) => c.v(
                    "schema",
                    "resume.current_task_id",
                    "must be a task id or null",
                ),
            }
        }
    }
    if let Some(links) = root.get("links") {
        match links.items() {
            None => c.v("schema", "links", "must be a list"),
            Some(items) => {
                for (i, l) in items.iter().enumerate() {
                    let path = idx("links", i);
                    if c.keys(l, &path, &["url", "description"], &[]) {
                        c.string(l.get("url"), &at(&path, "url"), None);
                        c.string(l.get("description"), &at(&path, "description"), None);
                    }
                }
            }
        }
    }
    if let Some(r) = root.get("replayId") {
        if c.keys(r, "replayId", &["value", "source"], &["value", "source"]) {
            c.pattern(r.get("value"), "replayId.value", hex64, "64 hex digits");
            c.one_of(
                r.get("source"),
                "replayId.source",
                &["auto", "manual"],
                "schema",
            );
        }
    }
    if let Some(run) = root.get("run") {
        let keys = [
            "created_at",
            "transition_reason",
            "previous_replay_id",
            "previous_run_ref",
        ];
        if c.keys(run, "run", &keys, &[]) {
            c.string(run.get("created_at"), "run.created_at", None);
            c.one_of(
                run.get("transition_reason"),
                "run.transition_reason",
                &["reset", "archive", "manual", "self_heal"],
                "schema",
            );
            c.pattern(
                run.get("previous_replay_id"),
                "run.previous_replay_id",
                hex64,
                "64 hex digits",
            );
            c.string(run.get("previous_run_ref"), "run.previous_run_ref", None);
        }
    }
}

fn workspace(c: &mut Check, root: &Node) {
    let keys = [
        "small_version",
        "owner",
        "kind",
        "created_at",
        "updated_at",
        "run",
    ];
    if !c.keys(root, "", &keys, &["small_version", "kind"]) {
        return;
    }
    c.header(root, "agent");
    c.one_of(
        root.get("kind"),
        "kind",
        &["repo-root", "examples"],
        "schema",
    );
    c.string(root.get("created_at"), "created_at", None);
    c.string(root.get("updated_at"), "updated_at", None);
    if let Some(run) = root.get("run") {
        if c.keys(run, "run", &["replay_id"], &[]) {
            c.pattern(
                run.get("replay_id"),
                "run.replay_id",
                hex64,
                "64 hex digits",
            );
        }
    }
}

fn has_evidence(e: &Node) -> bool {
    ["evidence", "verification", "test"]
        .iter()
        .any(|k| e.get(k).is_some())
}

/// S1-S3: what the files say about each other.
fn cross_file(ws: &Workspace, out: &mut Vec<Violation>) {
    let tasks = ws.tasks();
    let ids: HashSet<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let entries: &[Node] = ws
        .root(PROGRESS)
        .and_then(|p| p.get("entries"))
        .and_then(Node::items)
        .unwrap_or_default();
    let task_of = |e: &Node| e.get("task_id").and_then(Node::as_str).map(str::to_string);
    if ws.root(PLAN).is_some() && ws.root(PROGRESS).is_some() {
        let mut c = Check { out, file: PLAN };
        for (i, t) in tasks.iter().enumerate() {
            use super::Status::{Blocked, Completed};
            if !matches!(t.status, Completed | Blocked) {
                continue;
            }
            let proven = entries
                .iter()
                .any(|e| task_of(e).as_deref() == Some(t.id.as_str()) && has_evidence(e));
            if !proven {
                c.v(
                    "S1",
                    &format!("tasks[{i}].status"),
                    format!(
                        "task {:?} is {} without a progress entry with evidence",
                        t.id,
                        t.status.as_str()
                    ),
                );
            }
        }
        let replay = ws.replay_id();
        let mut c = Check {
            out,
            file: PROGRESS,
        };
        for (i, e) in entries.iter().enumerate() {
            let this_replay = match e.get("replayId").and_then(Node::as_str) {
                None => true,
                Some(r) => r.eq_ignore_ascii_case(&replay),
            };
            let Some(id) = task_of(e) else { continue };
            if this_replay && !ids.contains(id.as_str()) && !id.starts_with("meta/") {
                c.v(
                    "S2",
                    &format!("entries[{i}].task_id"),
                    format!("names {id:?}, which is neither a plan task nor meta/"),
                );
            }
        }
    }
    if let (Some(h), Some(_)) = (ws.root(HANDOFF), ws.root(PLAN)) {
        if let Some(current) = h
            .get("resume")
            .and_then(|r| r.get("current_task_id"))
            .and_then(Node::as_str)
        {
            if !current.is_empty() && !ids.contains(current) {
                out.push(Violation {
                    rule: "S3",
                    file: HANDOFF.into(),
                    key: "resume.current_task_id".into(),
                    message: format!("names {current:?}, which is not a plan task"),
                });
            }
        }
    }
}

const SECRET_KEYS: [&str; 7] = [
    "api_key",
    "apikey",
    "password",
    "secret",
    "token",
    "access_token",
    "private_key",
];

fn is_replay_path(path: &str) -> bool {
    matches!(
        path,
        "replayId" | "replayId.value" | "run.previous_replay_id" | "run.replay_id"
    ) || path.ends_with(".replayId")
        || path.ends_with(".command_sha256")
}

fn token_like(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    s.len() - body.len() <= 2
        && body.len() >= 32
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// Secret-looking keys, long base64-like values (the reference's strict scan: known replayId
/// and digest fields excepted) and `http://` links, anywhere in a file.
fn hygiene(c: &mut Check, node: &Node, path: &str) {
    match &node.kind {
        Kind::Map(pairs) => {
            for (k, v) in pairs {
                let p = at(path, k);
                if !is_replay_path(&p) {
                    let lower = k.to_ascii_lowercase();
                    if SECRET_KEYS.iter().any(|s| lower.contains(s)) {
                        c.v("secret", &p, "a secret-looking key");
                    } else if v.as_str().is_some_and(token_like) {
                        c.v("secret", &p, "a long base64-like value (a token?)");
                    }
                }
                hygiene(c, v, &p);
            }
        }
        Kind::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                hygiene(c, item, &idx(path, i));
            }
        }
        Kind::Scalar(_) => {
            let progress = c.file == PROGRESS;
            if node.as_str().is_some_and(|s| has_http_url(s, progress)) {
                c.v("insecure_link", path, "an http:// link (use https://)");
            }
        }
    }
}

/// Whether `s` holds an `http://` URL with a host (as the reference's strict scan finds them:
/// anywhere in the text); loopback hosts are allowed in the progress file only.
fn has_http_url(s: &str, allow_loopback: bool) -> bool {
    const LOOPBACK: [&str; 4] = ["localhost", "127.0.0.1", "0.0.0.0", "[::1]"];
    let lower = s.to_ascii_lowercase();
    lower.match_indices("http://").any(|(i, m)| {
        let host = &lower[i + m.len()..];
        let real = host
            .chars()
            .next()
            .is_some_and(|ch| !ch.is_whitespace() && !matches!(ch, '"' | '\'' | '>'));
        real && !(allow_loopback && LOOPBACK.iter().any(|l| host.starts_with(l)))
    })
}
