//! Git object ids (SHA-1) and the hashing of blob and tree objects, so that a snapshot's tree id
//! is exactly the id `git write-tree` gives the same content.

use sha1::{Digest, Sha1};
use std::fmt;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// A 20-byte git object id.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId(pub [u8; 20]);

impl ObjectId {
    /// Parse 40 lowercase or uppercase hex digits.
    pub fn from_hex(text: &[u8]) -> Option<ObjectId> {
        if text.len() != 40 {
            return None;
        }
        let mut out = [0u8; 20];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(ObjectId(out))
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", self.to_hex())
    }
}

fn finish(h: Sha1) -> ObjectId {
    ObjectId(h.finalize().into())
}

/// The id of a blob with these bytes.
pub fn blob_id(content: &[u8]) -> ObjectId {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", content.len()).as_bytes());
    h.update(content);
    finish(h)
}

/// The id of the blob held by the regular file `file`, of `len` bytes (its size when it was
/// listed), streamed 64 KiB at a time and never held whole: each chunk is also handed to `sink`
/// (to copy or write it elsewhere while hashing; `sink` may also stop the stream, e.g. on an
/// interrupt). Holes of a sparse file (`SEEK_DATA`/`SEEK_HOLE`) are hashed as zeros without being
/// read. A file whose size is not `len` by the end is an error: it changed while read.
pub fn blob_id_of_file(
    file: &File,
    len: u64,
    sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<ObjectId> {
    static ZEROS: [u8; CHUNK] = [0; CHUNK];
    let mut h = Sha1::new();
    h.update(format!("blob {len}\0").as_bytes());
    let mut buf = vec![0u8; CHUNK];
    let mut feed = |bytes: &[u8], h: &mut Sha1| -> std::io::Result<()> {
        h.update(bytes);
        sink(bytes)
    };
    let mut pos = 0u64;
    while pos < len {
        let (data, hole) = next_extent(file, pos, len)?;
        while pos < data {
            let n = (data - pos).min(CHUNK as u64) as usize;
            feed(&ZEROS[..n], &mut h)?;
            pos += n as u64;
        }
        while pos < hole {
            let want = (hole - pos).min(CHUNK as u64) as usize;
            let n = file.read_at(&mut buf[..want], pos)?;
            if n == 0 {
                return Err(changed_size(len));
            }
            feed(&buf[..n], &mut h)?;
            pos += n as u64;
        }
    }
    if file.metadata()?.len() != len {
        return Err(changed_size(len));
    }
    Ok(finish(h))
}

const CHUNK: usize = 1 << 16;

fn changed_size(len: u64) -> std::io::Error {
    std::io::Error::other(format!(
        "the file changed size while it was read (listed with {len} bytes)"
    ))
}

/// The next data extent at or after `pos`, clamped to `len`: (start, end). Before `start` is a
/// hole. A file system without `SEEK_DATA` reports everything as data.
fn next_extent(file: &File, pos: u64, len: u64) -> std::io::Result<(u64, u64)> {
    let fd = file.as_raw_fd();
    let seek = |from: u64, whence: libc::c_int| -> std::io::Result<Option<u64>> {
        let off = unsafe { libc::lseek(fd, from as libc::off_t, whence) };
        if off >= 0 {
            return Ok(Some(off as u64));
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => {
                Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
            }
            _ => Err(std::io::Error::last_os_error()),
        }
    };
    match seek(pos, libc::SEEK_DATA) {
        Ok(None) => Ok((len, len)),
        Ok(Some(data)) => {
            let data = data.min(len);
            let hole = seek(data, libc::SEEK_HOLE)?.unwrap_or(len).min(len);
            Ok((data, hole.max(data)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => Ok((pos, len)),
        Err(e) => Err(e),
    }
}

/// The id of a tree object with this body (`<mode> <name>\0<20 bytes>` per entry, git order).
pub fn tree_id(body: &[u8]) -> ObjectId {
    let mut h = Sha1::new();
    h.update(format!("tree {}\0", body.len()).as_bytes());
    h.update(body);
    finish(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_blob_and_empty_tree_have_gits_well_known_ids() {
        assert_eq!(
            blob_id(b"").to_hex(),
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        );
        assert_eq!(
            tree_id(b"").to_hex(),
            "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
        );
    }

    fn hash_file(file: &File, len: u64) -> std::io::Result<(ObjectId, u64)> {
        let mut streamed = 0u64;
        let id = blob_id_of_file(file, len, &mut |chunk| {
            streamed += chunk.len() as u64;
            Ok(())
        })?;
        Ok((id, streamed))
    }

    #[test]
    fn a_file_hashes_to_the_slice_hash_and_a_wrong_length_is_refused() {
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, b"hello world\n").unwrap();
        assert_eq!(
            hash_file(&file, 12).unwrap(),
            (blob_id(b"hello world\n"), 12)
        );
        assert!(hash_file(&file, 13).is_err());
        assert!(hash_file(&file, 11).is_err());
    }

    #[test]
    fn a_sparse_file_hashes_its_holes_as_zeros() {
        let file = tempfile::tempfile().unwrap();
        let len = 3 * CHUNK as u64 + 17;
        file.set_len(len).unwrap();
        file.write_at(b"data in the middle", 2 * CHUNK as u64 - 5)
            .unwrap();
        let mut expected = vec![0u8; len as usize];
        expected[2 * CHUNK - 5..2 * CHUNK + 13].copy_from_slice(b"data in the middle");
        assert_eq!(hash_file(&file, len).unwrap(), (blob_id(&expected), len));
    }
}
