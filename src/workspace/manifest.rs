//! A flat listing of a tree: path -> (kind, blob id), ordered by path bytes. It is what
//! `git ls-tree -r -z` prints, what a baseline caches, and what a snapshot computes; its git tree
//! id is computed here without git (directories are implied by their entries, so an empty
//! directory has no entry, exactly as in git).

use super::object_id::{self, ObjectId};
use super::tree_path;
use super::{WorkspaceError, WsResult};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What a tree entry is; the git mode follows from it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EntryKind {
    File,
    Executable,
    Symlink,
    /// A submodule commit (materialised as an empty directory).
    Gitlink,
}

impl EntryKind {
    pub fn git_mode(self) -> &'static str {
        match self {
            EntryKind::File => "100644",
            EntryKind::Executable => "100755",
            EntryKind::Symlink => "120000",
            EntryKind::Gitlink => "160000",
        }
    }

    pub fn from_git_mode(mode: &[u8]) -> Option<EntryKind> {
        match mode {
            b"100644" | b"100664" | b"100666" => Some(EntryKind::File),
            b"100755" => Some(EntryKind::Executable),
            b"120000" => Some(EntryKind::Symlink),
            b"160000" => Some(EntryKind::Gitlink),
            _ => None,
        }
    }

    fn git_type(self) -> &'static str {
        if self == EntryKind::Gitlink {
            "commit"
        } else {
            "blob"
        }
    }
}

/// One leaf of a tree.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Entry {
    pub kind: EntryKind,
    pub oid: ObjectId,
}

/// Path (bytes, `/`-separated, validated by [`tree_path::check`]) -> entry.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct Manifest {
    entries: BTreeMap<Vec<u8>, Entry>,
}

impl Manifest {
    /// Parse `git ls-tree -r -z` output (`<mode> SP <type> SP <oid> TAB <path> NUL`), refusing
    /// any unsafe path or unknown mode.
    pub fn parse(bytes: &[u8]) -> WsResult<Manifest> {
        let bad = |detail: String| WorkspaceError::GitOutput {
            command: "ls-tree -r -z".into(),
            detail,
        };
        let mut m = Manifest::default();
        for record in bytes.split(|&b| b == 0).filter(|r| !r.is_empty()) {
            let tab = record
                .iter()
                .position(|&b| b == b'\t')
                .ok_or_else(|| bad("a record without a tab".into()))?;
            let (head, path) = (&record[..tab], &record[tab + 1..]);
            let mut fields = head.split(|&b| b == b' ');
            let (mode, _type, oid) =
                match (fields.next(), fields.next(), fields.next(), fields.next()) {
                    (Some(m), Some(t), Some(o), None) => (m, t, o),
                    _ => {
                        return Err(bad(format!(
                            "malformed record {:?}",
                            String::from_utf8_lossy(head)
                        )))
                    }
                };
            tree_path::check(path)?;
            let kind = EntryKind::from_git_mode(mode).ok_or_else(|| {
                WorkspaceError::unsafe_path(
                    path,
                    format!("unsupported mode {}", String::from_utf8_lossy(mode)),
                )
            })?;
            let oid = ObjectId::from_hex(oid).ok_or_else(|| {
                bad(format!(
                    "bad object id for {:?}",
                    String::from_utf8_lossy(path)
                ))
            })?;
            m.insert(path.to_vec(), Entry { kind, oid })?;
        }
        Ok(m)
    }

    /// The same format `parse` reads.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * 80);
        for (path, e) in &self.entries {
            out.extend_from_slice(
                format!("{} {} {}\t", e.kind.git_mode(), e.kind.git_type(), e.oid).as_bytes(),
            );
            out.extend_from_slice(path);
            out.push(0);
        }
        out
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, path: &[u8]) -> Option<&Entry> {
        self.entries.get(path)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Entry)> {
        self.entries.iter()
    }

    /// Whether some entry lies beneath `dir/`.
    pub fn has_beneath(&self, dir: &[u8]) -> bool {
        let prefix = tree_path::join(dir, b"");
        self.entries
            .range(prefix.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&prefix))
    }

    /// Every entry beneath `dir/`, in path order.
    pub fn iter_beneath<'a>(
        &'a self,
        dir: &[u8],
    ) -> impl Iterator<Item = (&'a Vec<u8>, &'a Entry)> + 'a {
        let prefix = tree_path::join(dir, b"");
        self.entries
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
    }

    /// Insert a leaf. A leaf at an ancestor path (a file replaced by a directory) and every entry
    /// beneath this path (a directory replaced by a file) are removed first.
    pub fn insert(&mut self, path: Vec<u8>, entry: Entry) -> WsResult<()> {
        tree_path::check(&path)?;
        let mut i = 0;
        while let Some(off) = path[i..].iter().position(|&b| b == b'/') {
            self.entries.remove(&path[..i + off]);
            i += off + 1;
        }
        self.remove_beneath(&path);
        self.entries.insert(path, entry);
        Ok(())
    }

    /// Remove the leaf at `path` and everything beneath `path/`.
    pub fn remove_tree(&mut self, path: &[u8]) {
        self.entries.remove(path);
        self.remove_beneath(path);
    }

    /// Remove everything beneath `dir/` (not `dir` itself).
    pub fn remove_beneath(&mut self, dir: &[u8]) {
        let prefix = tree_path::join(dir, b"");
        let doomed: Vec<Vec<u8>> = self
            .entries
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            self.entries.remove(&k);
        }
    }

    /// The git tree id of this listing.
    pub fn tree_id(&self) -> ObjectId {
        hash_tree(&self.items(), &mut Reuse::None)
    }

    /// The tree id of every directory, by path (`""` is the root): what
    /// [`Manifest::tree_id_reusing`] takes for the directories a change did not touch.
    pub fn dir_ids(&self) -> DirIds {
        let mut ids = DirIds::new();
        let root = hash_tree(&self.items(), &mut Reuse::Record(&mut ids));
        ids.insert(Vec::new(), root);
        ids
    }

    /// The same id as [`Manifest::tree_id`], hashing only the directories in `dirty` (or absent
    /// from `known`): every other directory's id is taken from `known`, the [`Manifest::dir_ids`]
    /// of a manifest this one equals outside `dirty`. `dirty` must hold every directory (by path,
    /// `""` for the root) that is, or is an ancestor of, a path where the two manifests differ.
    pub fn tree_id_reusing(&self, known: &DirIds, dirty: &BTreeSet<Vec<u8>>) -> ObjectId {
        if !dirty.contains(&b""[..]) {
            if let Some(id) = known.get(&b""[..]) {
                return *id;
            }
        }
        hash_tree(&self.items(), &mut Reuse::Known { known, dirty })
    }

    fn items(&self) -> Vec<(&[u8], &Entry)> {
        self.entries
            .iter()
            .map(|(k, v)| (k.as_slice(), v))
            .collect()
    }
}

/// Tree ids of directories, by path.
pub type DirIds = HashMap<Vec<u8>, ObjectId>;

/// What `hash_dir` does with sub-directory ids: nothing, record them, or take the known id of a
/// directory that is not dirty.
enum Reuse<'a> {
    None,
    Record(&'a mut DirIds),
    Known {
        known: &'a DirIds,
        dirty: &'a BTreeSet<Vec<u8>>,
    },
}

/// One entry of a tree object being built: its sort key (a directory's name sorts as `name/`),
/// mode, name and id.
type Child = (Vec<u8>, &'static str, Vec<u8>, ObjectId);

/// Whether `path` is `dir` or lies beneath it (`""` is the root, above everything).
fn within(path: &[u8], dir: &[u8]) -> bool {
    dir.is_empty()
        || path == dir
        || (path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/')
}

/// The tree object of one directory's children.
fn tree_object(mut children: Vec<Child>) -> ObjectId {
    children.sort_by(|a, b| a.0.cmp(&b.0));
    let mut body = Vec::with_capacity(children.len() * 40);
    for (_, mode, name, id) in children {
        body.extend_from_slice(mode.as_bytes());
        body.push(b' ');
        body.extend_from_slice(&name);
        body.push(0);
        body.extend_from_slice(&id.0);
    }
    object_id::tree_id(&body)
}

/// The tree id of `items` (full paths, sorted), in one pass with an explicit stack of the open
/// directories (no recursion, whatever the depth): a directory is hashed when the pass leaves it.
fn hash_tree(items: &[(&[u8], &Entry)], reuse: &mut Reuse<'_>) -> ObjectId {
    let mut stack: Vec<(Vec<u8>, Vec<Child>)> = vec![(Vec::new(), Vec::new())];
    let close = |stack: &mut Vec<(Vec<u8>, Vec<Child>)>, reuse: &mut Reuse<'_>| {
        let Some((path, children)) = stack.pop() else {
            return;
        };
        let id = tree_object(children);
        let name = tree_path::file_name(&path).to_vec();
        if let Reuse::Record(ids) = reuse {
            ids.insert(path, id);
        }
        let mut key = name.clone();
        key.push(b'/');
        if let Some((_, parent)) = stack.last_mut() {
            parent.push((key, "40000", name, id));
        }
    };
    let mut i = 0;
    'items: while i < items.len() {
        let (path, entry) = items[i];
        let parent = tree_path::parent(path);
        while stack.len() > 1 && !within(parent, &stack[stack.len() - 1].0) {
            close(&mut stack, reuse);
        }
        loop {
            let top = &stack[stack.len() - 1].0;
            if top.as_slice() == parent {
                break;
            }
            let start = if top.is_empty() { 0 } else { top.len() + 1 };
            let end = parent[start..]
                .iter()
                .position(|&b| b == b'/')
                .map_or(parent.len(), |o| start + o);
            let dir = parent[..end].to_vec();
            let known = match reuse {
                Reuse::Known { known, dirty } if !dirty.contains(&dir) => known.get(&dir).copied(),
                _ => None,
            };
            if let Some(id) = known {
                // An untouched directory: its known id, and every item beneath it skipped.
                let name = tree_path::file_name(&dir).to_vec();
                let mut key = name.clone();
                key.push(b'/');
                let top = stack.len() - 1;
                stack[top].1.push((key, "40000", name, id));
                i += items[i..].partition_point(|(p, _)| within(p, &dir));
                continue 'items;
            }
            stack.push((dir, Vec::new()));
        }
        let name = tree_path::file_name(path).to_vec();
        let top = stack.len() - 1;
        stack[top]
            .1
            .push((name.clone(), entry.kind.git_mode(), name, entry.oid));
        i += 1;
    }
    while stack.len() > 1 {
        close(&mut stack, reuse);
    }
    stack
        .pop()
        .map(|(_, children)| tree_object(children))
        .unwrap_or_else(|| tree_object(Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::object_id::blob_id;

    fn file(content: &[u8]) -> Entry {
        Entry {
            kind: EntryKind::File,
            oid: blob_id(content),
        }
    }

    #[test]
    fn empty_manifest_is_the_empty_tree() {
        assert_eq!(
            Manifest::default().tree_id().to_hex(),
            "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
        );
    }

    #[test]
    fn a_tree_thousands_of_levels_deep_hashes_on_a_small_stack() {
        let deep: Vec<u8> = vec![&b"d"[..]; 20_000].join(&b'/');
        let mut m = Manifest::default();
        m.insert(tree_path::join(&deep, b"f"), file(b"x")).unwrap();
        m.insert(b"top".to_vec(), file(b"y")).unwrap();
        let id = std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || (m.tree_id(), m.dir_ids().len()))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(id.1, 20_001, "every directory and the root recorded");
    }

    #[test]
    fn parse_and_to_bytes_round_trip() {
        let mut m = Manifest::default();
        m.insert(b"a/b".to_vec(), file(b"x")).unwrap();
        m.insert(
            b"c".to_vec(),
            Entry {
                kind: EntryKind::Symlink,
                oid: blob_id(b"a/b"),
            },
        )
        .unwrap();
        assert_eq!(Manifest::parse(&m.to_bytes()).unwrap(), m);
    }

    #[test]
    fn inserting_beneath_a_file_replaces_the_file_and_a_file_replaces_a_directory() {
        let mut m = Manifest::default();
        m.insert(b"a".to_vec(), file(b"1")).unwrap();
        m.insert(b"a/b".to_vec(), file(b"2")).unwrap();
        assert!(m.get(b"a").is_none());
        m.insert(b"a".to_vec(), file(b"3")).unwrap();
        assert!(m.get(b"a/b").is_none() && m.get(b"a").is_some());
    }

    #[test]
    fn parse_refuses_dot_dot_and_dot_git_paths() {
        let oid = blob_id(b"x");
        for p in ["../evil", "a/../../evil", ".git/hooks/pre-commit"] {
            let rec = format!("100644 blob {oid}\t{p}\0");
            assert!(
                matches!(
                    Manifest::parse(rec.as_bytes()),
                    Err(WorkspaceError::UnsafePath { .. })
                ),
                "{p}"
            );
        }
    }

    #[test]
    fn reusing_clean_directory_ids_gives_the_full_tree_id_after_random_changes() {
        // A deterministic pseudo-random walk of inserts and removals over a nested tree; every
        // changed path marks itself and its ancestors dirty, as the snapshot does.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let names = [&b"a"[..], b"b", b"c.txt", b"d-e", b"sub"];
        let random_path = |next: &mut dyn FnMut(u64) -> u64| {
            let depth = 1 + next(4) as usize;
            let parts: Vec<&[u8]> = (0..depth)
                .map(|_| names[next(names.len() as u64) as usize])
                .collect();
            parts.join(&b'/')
        };
        let mut base = Manifest::default();
        for i in 0..200 {
            base.insert(random_path(&mut next), file(format!("{i}").as_bytes()))
                .unwrap();
        }
        let known = base.dir_ids();
        assert_eq!(known[&b""[..]], base.tree_id());
        for round in 0..50 {
            let mut m = base.clone();
            let mut dirty = BTreeSet::from([Vec::new()]);
            for _ in 0..(1 + next(5)) {
                let p = random_path(&mut next);
                for (i, _) in p.iter().enumerate().filter(|(_, b)| **b == b'/') {
                    dirty.insert(p[..i].to_vec());
                }
                dirty.insert(p.clone());
                if next(3) == 0 {
                    m.remove_tree(&p);
                } else {
                    m.insert(p, file(format!("r{round}").as_bytes())).unwrap();
                }
            }
            assert_eq!(
                m.tree_id_reusing(&known, &dirty),
                m.tree_id(),
                "round {round}"
            );
        }
    }
}
