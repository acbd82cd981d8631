//! Where a forwarded plain-HTTP request ends: its body as framed by `Content-Length` or `chunked`
//! (chunk sizes read by `httparse`), so that exactly one request reaches the origin. Bytes the
//! client sends after the end (a pipelined second request, whatever its `Host`) are never
//! forwarded: the connection carries one request.

/// How a request's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (neither header).
    Empty,
    /// `Content-Length: n`.
    Length(u64),
    /// `Transfer-Encoding: ... chunked`.
    Chunked,
}

/// Longest chunk-size line or trailer line accepted.
const MAX_LINE: usize = 4096;
/// Most trailer bytes accepted after the last chunk.
const MAX_TRAILERS: usize = 16 * 1024;

/// Follows a request body through the bytes the client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyEnd {
    state: State,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// `n` body bytes still to come.
    Fixed(u64),
    /// Reading a chunk-size line (bytes so far).
    SizeLine(Vec<u8>),
    /// `n` chunk data bytes still to come, then CRLF.
    ChunkData(u64),
    /// The CRLF after a chunk's data (how many of its two bytes seen).
    ChunkEnd(u8),
    /// Trailer lines after the last chunk: the current line, and trailer bytes so far.
    Trailers(Vec<u8>, usize),
    Done,
}

impl BodyEnd {
    pub fn new(framing: Framing) -> BodyEnd {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Fixed(n),
            Framing::Chunked => State::SizeLine(Vec::new()),
        };
        BodyEnd { state }
    }

    /// The request is complete: nothing more belongs to it.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// How many leading bytes of `data` belong to the body (all of them unless it ends inside).
    /// A chunked body that breaks its framing is an error naming the problem.
    pub fn take(&mut self, data: &[u8]) -> Result<usize, String> {
        let mut used = 0;
        while used < data.len() {
            let rest = &data[used..];
            match &mut self.state {
                State::Done => break,
                State::Fixed(left) | State::ChunkData(left) => {
                    let n = (*left).min(rest.len() as u64);
                    *left -= n;
                    used += n as usize;
                    if *left == 0 {
                        self.state = match self.state {
                            State::Fixed(_) => State::Done,
                            _ => State::ChunkEnd(0),
                        };
                    }
                }
                State::ChunkEnd(seen) => {
                    let expected = b"\r\n"[usize::from(*seen)];
                    if rest[0] != expected {
                        return Err("chunk data is not followed by CRLF".into());
                    }
                    used += 1;
                    *seen += 1;
                    if *seen == 2 {
                        self.state = State::SizeLine(Vec::new());
                    }
                }
                State::SizeLine(line) => {
                    let (n, complete) = line_part(rest);
                    line.extend_from_slice(&rest[..n]);
                    used += n;
                    if line.len() > MAX_LINE {
                        return Err(format!("a chunk-size line is longer than {MAX_LINE} bytes"));
                    }
                    if complete {
                        let size = match httparse::parse_chunk_size(line) {
                            Ok(httparse::Status::Complete((_, size))) => size,
                            _ => return Err("unreadable chunk size".into()),
                        };
                        self.state = if size == 0 {
                            State::Trailers(Vec::new(), 0)
                        } else {
                            State::ChunkData(size)
                        };
                    }
                }
                State::Trailers(line, total) => {
                    let (n, complete) = line_part(rest);
                    line.extend_from_slice(&rest[..n]);
                    used += n;
                    *total += n;
                    if *total > MAX_TRAILERS {
                        return Err(format!("trailers longer than {MAX_TRAILERS} bytes"));
                    }
                    if complete {
                        if line.as_slice() == b"\r\n" {
                            self.state = State::Done;
                        } else {
                            line.clear();
                        }
                    }
                }
            }
        }
        Ok(used)
    }
}

/// How many bytes of `data` up to and including the first LF, and whether a LF was found.
fn line_part(data: &[u8]) -> (usize, bool) {
    match data.iter().position(|b| *b == b'\n') {
        Some(i) => (i + 1, true),
        None => (data.len(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `data` in pieces of `step` bytes; return how many bytes belonged to the body.
    fn body_len(framing: Framing, data: &[u8], step: usize) -> Result<usize, String> {
        let mut end = BodyEnd::new(framing);
        let mut total = 0;
        for piece in data.chunks(step) {
            let n = end.take(piece)?;
            total += n;
            if n < piece.len() {
                break;
            }
        }
        Ok(total)
    }

    #[test]
    fn a_fixed_length_body_ends_after_its_length() {
        let data = b"hello GET http://other.test/ HTTP/1.1\r\n\r\n";
        for step in [1, 3, data.len()] {
            assert_eq!(body_len(Framing::Length(5), data, step), Ok(5));
        }
        assert_eq!(body_len(Framing::Empty, data, 7), Ok(0));
    }

    #[test]
    fn a_chunked_body_ends_after_its_last_chunk_and_trailers() {
        let body = b"4;ext=1\r\nwiki\r\n5\r\npedia\r\n0\r\nX-Trailer: 1\r\n\r\n";
        let mut data = body.to_vec();
        data.extend_from_slice(b"GET http://other.test/ HTTP/1.1\r\n\r\n");
        for step in [1, 2, 5, data.len()] {
            assert_eq!(
                body_len(Framing::Chunked, &data, step),
                Ok(body.len()),
                "step {step}"
            );
        }
    }

    #[test]
    fn a_broken_chunked_body_is_an_error() {
        assert_eq!(
            body_len(Framing::Chunked, b"zz\r\n", 4),
            Err("unreadable chunk size".into())
        );
        assert_eq!(
            body_len(Framing::Chunked, b"1\r\nab", 5),
            Err("chunk data is not followed by CRLF".into())
        );
    }
}
