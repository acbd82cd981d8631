//! Git object ids (SHA-1) and the hashing of blob and tree objects, so that a snapshot's tree id
//! is exactly the id `git write-tree` gives the same content.

use sha1::{Digest, Sha1};
use std::fmt;
use std::io::Read;

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

/// The id of a blob of `len` bytes read from `reader`; errors if it yields a different length.
pub fn blob_id_of_reader(len: u64, reader: &mut impl Read) -> std::io::Result<ObjectId> {
    let mut h = Sha1::new();
    h.update(format!("blob {len}\0").as_bytes());
    let mut buf = vec![0u8; 1 << 16];
    let mut seen = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        seen += n as u64;
        h.update(&buf[..n]);
    }
    if seen != len {
        return Err(std::io::Error::other(format!("file size changed while hashing ({len} -> {seen} bytes)")));
    }
    Ok(finish(h))
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
        assert_eq!(blob_id(b"").to_hex(), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
        assert_eq!(tree_id(b"").to_hex(), "4b825dc642cb6eb9a060e54bf8d69288fbee4904");
    }

    #[test]
    fn reader_hash_equals_slice_hash_and_refuses_a_wrong_length() {
        let data = b"hello world\n";
        assert_eq!(blob_id_of_reader(12, &mut &data[..]).unwrap(), blob_id(data));
        assert!(blob_id_of_reader(13, &mut &data[..]).is_err());
    }
}
