//! The bounded whole-document buffer the single-document formats share (claude json, gemini
//! json): bytes pushed in chunks of any size are kept up to the cap; a document over it is
//! dropped (its memory freed) and read as [`Document::Oversized`].

#[derive(Debug, PartialEq, Eq)]
pub enum Document {
    Whole(Vec<u8>),
    Oversized,
}

#[derive(Debug)]
pub struct DocumentBuffer {
    bytes: Vec<u8>,
    over: bool,
    cap: usize,
}

impl DocumentBuffer {
    pub fn new(cap: usize) -> DocumentBuffer {
        DocumentBuffer {
            bytes: Vec::new(),
            over: false,
            cap,
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        if self.over || chunk.is_empty() {
            return;
        }
        let needed = self.bytes.len().saturating_add(chunk.len());
        if needed > self.cap {
            self.over = true;
            self.bytes = Vec::new();
            return;
        }
        if needed > self.bytes.capacity() {
            let grown = needed
                .max(self.bytes.capacity().saturating_mul(2))
                .min(self.cap);
            self.bytes.reserve_exact(grown - self.bytes.len());
        }
        self.bytes.extend_from_slice(chunk);
    }

    pub fn finish(self) -> Document {
        if self.over {
            Document::Oversized
        } else {
            Document::Whole(self.bytes)
        }
    }

    /// The memory the buffer holds (its capacity): never over the cap.
    pub fn buffered_bytes(&self) -> usize {
        self.bytes.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_kept_whole_up_to_the_cap() {
        let mut d = DocumentBuffer::new(6);
        d.feed(b"abc");
        d.feed(b"def");
        assert!(d.buffered_bytes() <= 6);
        assert_eq!(d.finish(), Document::Whole(b"abcdef".to_vec()));
    }

    #[test]
    fn a_document_over_the_cap_is_oversized_and_its_memory_freed() {
        let mut d = DocumentBuffer::new(6);
        d.feed(b"abcd");
        d.feed(b"efg");
        assert_eq!(d.buffered_bytes(), 0);
        d.feed(b"h");
        assert_eq!(d.finish(), Document::Oversized);
    }
}
