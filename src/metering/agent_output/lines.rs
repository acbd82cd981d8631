//! The bounded line splitter the line formats share (claude stream-json, codex, aider): bytes
//! pushed in chunks of any size and split come out as whole lines (without their newline; the
//! last line needs none). A line over its cap is skipped to its newline through no more memory
//! than the cap and comes out as [`Line::Oversized`]; past the total cap nothing more is read,
//! and the cut (the line the cap cut, or the unread rest) comes out as one [`Line::Oversized`].

/// One line as the splitter gives it.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    Whole(&'a [u8]),
    Oversized,
}

#[derive(Debug)]
pub struct LineSplitter {
    line: Vec<u8>,
    skipping: bool,
    fed: u64,
    cut: bool,
    max_line: usize,
    max_total: u64,
}

impl LineSplitter {
    pub fn new(max_line: usize, max_total: u64) -> LineSplitter {
        LineSplitter {
            line: Vec::new(),
            skipping: false,
            fed: 0,
            cut: false,
            max_line,
            max_total,
        }
    }

    /// Push `bytes`; `each` is called on every line they complete.
    pub fn feed(&mut self, bytes: &[u8], each: &mut dyn FnMut(Line<'_>)) {
        let room = self.max_total.saturating_sub(self.fed);
        let take = usize::try_from(room).unwrap_or(usize::MAX).min(bytes.len());
        if take < bytes.len() {
            self.cut = true;
        }
        self.fed += take as u64;
        let mut rest = &bytes[..take];
        while !rest.is_empty() {
            match rest.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    self.append(&rest[..i]);
                    if self.skipping {
                        each(Line::Oversized);
                    } else {
                        each(Line::Whole(&self.line));
                    }
                    self.line.clear();
                    self.skipping = false;
                    rest = &rest[i + 1..];
                }
                None => {
                    self.append(rest);
                    rest = &[];
                }
            }
        }
    }

    /// The end of the input: the last line without a newline, or the cut.
    pub fn finish(self, each: &mut dyn FnMut(Line<'_>)) {
        if self.skipping || self.cut {
            each(Line::Oversized);
        } else if !self.line.is_empty() {
            each(Line::Whole(&self.line));
        }
    }

    /// The memory the splitter holds (its line buffer's capacity): never over the line cap.
    pub fn buffered_bytes(&self) -> usize {
        self.line.capacity()
    }

    fn append(&mut self, body: &[u8]) {
        if self.skipping || body.is_empty() {
            return;
        }
        let needed = self.line.len() + body.len();
        if needed > self.max_line {
            self.skipping = true;
            self.line = Vec::new();
            return;
        }
        if needed > self.line.capacity() {
            let grown = needed
                .max(self.line.capacity().saturating_mul(2))
                .min(self.max_line);
            self.line.reserve_exact(grown - self.line.len());
        }
        self.line.extend_from_slice(body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]], max_line: usize, max_total: u64) -> Vec<Option<Vec<u8>>> {
        let mut out = Vec::new();
        let mut each = |l: Line<'_>| {
            out.push(match l {
                Line::Whole(b) => Some(b.to_vec()),
                Line::Oversized => None,
            })
        };
        let mut s = LineSplitter::new(max_line, max_total);
        for c in chunks {
            s.feed(c, &mut each);
        }
        s.finish(&mut each);
        out
    }

    #[test]
    fn lines_come_out_whole_whatever_the_split_and_the_last_needs_no_newline() {
        let want = vec![
            Some(b"ab".to_vec()),
            Some(b"".to_vec()),
            Some(b"cde".to_vec()),
        ];
        assert_eq!(split(&[b"ab\n\ncde"], 10, 100), want);
        assert_eq!(split(&[b"a", b"b\n", b"\nc", b"d", b"e"], 10, 100), want);
    }

    #[test]
    fn a_line_over_the_cap_is_oversized_and_the_next_line_is_read() {
        assert_eq!(
            split(&[b"0123", b"456789abc\nok\n"], 8, 100),
            vec![None, Some(b"ok".to_vec())]
        );
        assert_eq!(
            split(&[b"ok\n0123456789"], 8, 100),
            vec![Some(b"ok".to_vec()), None]
        );
    }

    #[test]
    fn the_buffer_never_grows_past_the_line_cap() {
        let mut s = LineSplitter::new(1000, u64::MAX);
        for _ in 0..100 {
            s.feed(&[b'x'; 37], &mut |_| {});
            assert!(s.buffered_bytes() <= 1000, "{}", s.buffered_bytes());
        }
    }

    #[test]
    fn past_the_total_cap_the_cut_counts_once_oversized() {
        // The cap falls inside the second line.
        assert_eq!(
            split(&[b"ab\ncdef\ngh\n"], 10, 5),
            vec![Some(b"ab".to_vec()), None]
        );
        // The cap falls right after a newline, and more follows.
        assert_eq!(
            split(&[b"ab\n", b"cd\n"], 10, 3),
            vec![Some(b"ab".to_vec()), None]
        );
        // The input ends exactly at the cap: nothing was cut.
        assert_eq!(split(&[b"ab\n"], 10, 3), vec![Some(b"ab".to_vec())]);
    }
}
