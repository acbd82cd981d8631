//! Which paths a workspace tree may hold. A path from git (or from the agent's upper layer) is a
//! sequence of `/`-separated components, each non-empty, not `.` or `..`, not `.git` in any case,
//! and without a NUL byte; it is never absolute. Anything else is refused before it touches the
//! file system, so a crafted tree object cannot write outside the baseline or plant a `.git`.
//!
//! [`git_alias`] applies git's own rules for names that other file systems resolve to `.git`,
//! `.gitmodules` or `.gitattributes` (what `core.protectHFS` and `core.protectNTFS` refuse, and
//! `git fsck` reports as `hasDotgit`): on HFS+, the name with Unicode code points HFS+ ignores
//! removed and ASCII case folded; on NTFS, trailing dots and spaces, an alternate data stream
//! (`.git::$INDEX_ALLOCATION`), a backslash, and 8.3 short names (`GIT~1`, `GITMOD~1`,
//! `gi7eba~1`). The snapshot refuses such a name from the agent: delivered, it would be `.git`
//! (or an unprotected `.gitmodules`) on the operator's or a collaborator's machine.

use super::{WorkspaceError, WsResult};

/// Whether one path component is acceptable; the reason when it is not.
pub fn component_problem(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() {
        return Some("empty path component");
    }
    if name == b"." || name == b".." {
        return Some("`.` or `..` component");
    }
    if name.contains(&b'/') {
        return Some("`/` inside a component");
    }
    if name.contains(&0) {
        return Some("NUL byte");
    }
    if name.eq_ignore_ascii_case(b".git") {
        return Some("`.git` component");
    }
    None
}

/// Code points HFS+ ignores in a name (git's `next_hfs_char`).
const HFS_IGNORED: &[u32] = &[
    0x200c, 0x200d, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x206a, 0x206b, 0x206c,
    0x206d, 0x206e, 0x206f, 0xfeff,
];

/// The git names loopexec guards, with the NTFS 8.3 fallback short-name prefix of each.
const GUARDED: &[(&str, &str)] = &[
    ("git", ""),
    ("gitmodules", "gi7eba"),
    ("gitattributes", "gi7d29"),
];

/// The git name (`.git`, `.gitmodules`, `.gitattributes`) that the component `name` stands for on
/// HFS+ or NTFS, when `name` is not that exact name itself.
pub fn git_alias(name: &[u8]) -> Option<&'static str> {
    const DOT_NAMES: &[&str] = &[".git", ".gitmodules", ".gitattributes"];
    let (i, _) = GUARDED.iter().enumerate().find(|(_, (needle, short))| {
        hfs_is_dot(name, needle)
            || if needle == &"git" {
                ntfs_is_dotgit(name)
            } else {
                ntfs_is_dot(name, needle, short)
            }
    })?;
    let canonical = DOT_NAMES[i];
    (name != canonical.as_bytes()).then_some(canonical)
}

/// git's `is_hfs_dot_generic`: `.` + `needle`, ASCII case folded, ignoring HFS+'s ignorable
/// code points anywhere (malformed UTF-8 never matches).
fn hfs_is_dot(name: &[u8], needle: &str) -> bool {
    let Ok(text) = std::str::from_utf8(name) else {
        return false;
    };
    let mut chars = text.chars().filter(|c| !HFS_IGNORED.contains(&(*c as u32)));
    if chars.next() != Some('.') {
        return false;
    }
    for want in needle.chars() {
        match chars.next() {
            Some(c) if c.is_ascii() && c.to_ascii_lowercase() == want => {}
            _ => return false,
        }
    }
    chars.next().is_none()
}

/// The byte at `i`, or 0 past the end (git reads NUL-terminated strings).
fn at(name: &[u8], i: usize) -> u8 {
    name.get(i).copied().unwrap_or(0)
}

/// From `i` on, only spaces and periods up to the end or an NTFS stream separator `:`.
fn only_spaces_and_periods(name: &[u8], mut i: usize, stops: &[u8]) -> bool {
    loop {
        let c = at(name, i);
        i += 1;
        if c == 0 || stops.contains(&c) {
            return true;
        }
        if c != b' ' && c != b'.' {
            return false;
        }
    }
}

/// git's `is_ntfs_dotgit`: `.git` or `git~1` (any case), then only dots and spaces up to the end,
/// a `:` (a stream name) or a `\` (a directory separator on Windows).
fn ntfs_is_dotgit(name: &[u8]) -> bool {
    let lower = |i: usize| at(name, i).to_ascii_lowercase();
    let rest = if lower(0) == b'.' && lower(1) == b'g' && lower(2) == b'i' && lower(3) == b't' {
        4
    } else if lower(0) == b'g'
        && lower(1) == b'i'
        && lower(2) == b't'
        && at(name, 3) == b'~'
        && at(name, 4) == b'1'
    {
        5
    } else {
        return false;
    };
    only_spaces_and_periods(name, rest, b"\\/:")
}

/// git's `is_ntfs_dot_generic`: `.<needle>` with trailing dots, spaces or a stream; the short
/// name `<first six of needle>~1`..`~4`; or the fall-back short name `<short prefix>~<digits>`.
fn ntfs_is_dot(name: &[u8], needle: &str, short_prefix: &str) -> bool {
    let needle = needle.as_bytes();
    let prefix = short_prefix.as_bytes();
    if at(name, 0) == b'.'
        && name.len() > needle.len()
        && name[1..=needle.len()].eq_ignore_ascii_case(needle)
    {
        return only_spaces_and_periods(name, needle.len() + 1, b":");
    }
    if name.len() >= 8
        && name[..6].eq_ignore_ascii_case(&needle[..6])
        && name[6] == b'~'
        && (b'1'..=b'4').contains(&name[7])
    {
        return only_spaces_and_periods(name, 8, b":");
    }
    let mut saw_tilde = false;
    let mut i = 0;
    while i < 8 {
        let c = at(name, i);
        if c == 0 {
            return false;
        } else if saw_tilde {
            if !c.is_ascii_digit() {
                return false;
            }
        } else if c == b'~' {
            i += 1;
            if !(b'1'..=b'9').contains(&at(name, i)) {
                return false;
            }
            saw_tilde = true;
        } else if i >= 6 || c & 0x80 != 0 || c.to_ascii_lowercase() != prefix[i] {
            return false;
        }
        i += 1;
    }
    only_spaces_and_periods(name, 8, b":")
}

/// Check a full relative path (`a/b/c`).
pub fn check(path: &[u8]) -> WsResult<()> {
    if path.first() == Some(&b'/') {
        return Err(WorkspaceError::unsafe_path(path, "absolute path"));
    }
    for c in path.split(|&b| b == b'/') {
        if let Some(reason) = component_problem(c) {
            return Err(WorkspaceError::unsafe_path(path, reason));
        }
    }
    Ok(())
}

/// The parent of `a/b/c` is `a/b`; of `a` it is empty.
pub fn parent(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => &path[..i],
        None => b"",
    }
}

/// The last component.
pub fn file_name(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// `a/b` joined with `c`.
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_paths_pass() {
        for p in [
            &b"a"[..],
            b"src/main.rs",
            b".github/workflows/ci.yml",
            b"a/.gitignore",
        ] {
            check(p).unwrap();
        }
    }

    #[test]
    fn names_git_resolves_to_dot_git_on_hfs_or_ntfs_are_aliases() {
        let cases: &[(&str, &str)] = &[
            (".git\u{200c}", ".git"),
            ("\u{feff}.gi\u{200d}t", ".git"),
            (".G\u{206f}IT", ".git"),
            ("git~1", ".git"),
            ("GIT~1", ".git"),
            (".git.", ".git"),
            (".git ", ".git"),
            (".git. . ", ".git"),
            (".git::$INDEX_ALLOCATION", ".git"),
            (".git:stream", ".git"),
            (".git\\hooks", ".git"),
            ("git~1.. ", ".git"),
            (".GITMODULES", ".gitmodules"),
            (".gitmodules\u{200e}", ".gitmodules"),
            (".gitmodules .", ".gitmodules"),
            (".gitmodules::$DATA", ".gitmodules"),
            ("GITMOD~1", ".gitmodules"),
            ("gitmod~4", ".gitmodules"),
            ("gi7eba~1", ".gitmodules"),
            ("gi7eb~12", ".gitmodules"),
            (".GitAttributes", ".gitattributes"),
            (".gitattributes\u{202e}", ".gitattributes"),
            ("GITATT~1", ".gitattributes"),
            ("gi7d29~9", ".gitattributes"),
        ];
        for (name, alias) in cases {
            assert_eq!(git_alias(name.as_bytes()), Some(*alias), "{name:?}");
        }
    }

    #[test]
    fn the_real_names_and_ordinary_look_alikes_are_not_aliases() {
        for name in [
            ".gitmodules",
            ".gitattributes",
            ".gitignore",
            ".github",
            ".git-blame-ignore-revs",
            "git",
            "git~2",
            ".gitx",
            "gitmod~5",
            "gi7eba~a",
            "a.git",
            ".gi\u{0301}t",
        ] {
            assert_eq!(git_alias(name.as_bytes()), None, "{name:?}");
        }
        assert_eq!(
            git_alias(b".git\xff"),
            None,
            "malformed UTF-8 never matches on HFS+"
        );
    }

    #[test]
    fn dot_dot_absolute_empty_and_dot_git_components_are_refused() {
        for p in [
            &b"../x"[..],
            b"a/../../x",
            b"/etc/passwd",
            b"a//b",
            b"a/./b",
            b".git/config",
            b"sub/.GIT/hooks/x",
            b"",
            b"a/",
        ] {
            assert!(
                matches!(check(p), Err(WorkspaceError::UnsafePath { .. })),
                "{:?}",
                String::from_utf8_lossy(p)
            );
        }
    }
}
