//! The chunked transfer coding of an upstream's answer (RFC 9112 §7.1), decoded as bytes arrive,
//! for the direct road that reads the upstream's answer itself (`direct.rs`). Strict where
//! the coding is: hex sizes only (no sign, no prefix, at most 15 digits), CRLF line ends, and
//! bounded extension and trailer lines; a chunk extension or trailer is skipped, never passed on.
//! Decoding does not depend on where the reads split the bytes (property test and fuzz target).

use std::fmt;

/// The longest chunk-size line (extensions included) and the most trailer bytes read.
const MAX_LINE: usize = 4096;
const MAX_TRAILERS: usize = 16 * 1024;
/// 15 hex digits: a size that cannot overflow when one more digit is taken.
const MAX_SIZE_DIGITS: u8 = 15;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// A chunk size that is not hex digits, or none.
    BadSize,
    /// More than 15 hex digits.
    SizeTooLarge,
    /// A line that ends without CRLF, or a chunk's data not followed by CRLF.
    BadLineEnd,
    /// A chunk-size line or the trailers past their bounds.
    TooLong,
}

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChunkError::BadSize => "a chunk size that is not hex digits",
            ChunkError::SizeTooLarge => "a chunk size too large",
            ChunkError::BadLineEnd => "a chunk line not ended by CRLF",
            ChunkError::TooLong => "a chunk extension or trailer too long",
        })
    }
}

impl std::error::Error for ChunkError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a chunk size's hex digits (`digits` so far).
    Size {
        digits: u8,
    },
    /// Skipping what follows the size (whitespace, extensions) up to CR.
    Extension,
    /// The size line's CR was read; LF next.
    SizeLf,
    /// This many data bytes of the chunk are still to come.
    Data(u64),
    /// The chunk's data ended; CR, then LF.
    DataCr,
    DataLf,
    /// At the start of a trailer line, or of the empty line that ends the answer.
    TrailerStart,
    /// Inside a trailer field line, up to CR.
    Trailer,
    TrailerLf,
    /// The last line's CR was read; LF ends the answer.
    EndLf,
    Done,
}

/// A chunked decoder's state between reads.
#[derive(Debug, Clone)]
pub struct Chunked {
    state: State,
    size: u64,
    /// Bytes of the current size line, or of all the trailers.
    line: usize,
}

impl Default for Chunked {
    fn default() -> Self {
        Chunked {
            state: State::Size { digits: 0 },
            size: 0,
            line: 0,
        }
    }
}

impl Chunked {
    /// Whether the last chunk and the trailers have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decode `input`, handing each run of data it holds to `data` as a sub-slice, in order.
    /// Returns how much of `input` was read: all of it, unless the answer ended inside it.
    pub fn feed<'a>(&mut self, input: &'a [u8], mut data: impl FnMut(&'a [u8])) -> Result<usize, ChunkError> {
        let mut at = 0;
        while at < input.len() {
            if let State::Data(left) = self.state {
                let take = (input.len() - at).min(usize::try_from(left).unwrap_or(usize::MAX));
                data(&input[at..at + take]);
                at += take;
                let left = left - take as u64;
                self.state = if left == 0 { State::DataCr } else { State::Data(left) };
                continue;
            }
            if self.state == State::Done {
                break;
            }
            self.byte(input[at])?;
            at += 1;
        }
        Ok(at)
    }

    /// One byte of a size line, a line end or a trailer.
    fn byte(&mut self, b: u8) -> Result<(), ChunkError> {
        self.state = match self.state {
            State::Size { digits } => match (b as char).to_digit(16) {
                Some(d) if digits < MAX_SIZE_DIGITS => {
                    self.size = self.size * 16 + u64::from(d);
                    self.line += 1;
                    State::Size { digits: digits + 1 }
                }
                Some(_) => return Err(ChunkError::SizeTooLarge),
                None if digits == 0 => return Err(ChunkError::BadSize),
                None => match b {
                    b'\r' => State::SizeLf,
                    // Whitespace before an extension (BWS), or the extension itself.
                    b';' | b' ' | b'\t' => self.count(State::Extension, MAX_LINE)?,
                    _ => return Err(ChunkError::BadSize),
                },
            },
            State::Extension => self.line_byte(b, State::SizeLf, State::Extension, MAX_LINE)?,
            State::SizeLf => match b {
                b'\n' if self.size == 0 => {
                    self.line = 0;
                    State::TrailerStart
                }
                b'\n' => State::Data(std::mem::take(&mut self.size)),
                _ => return Err(ChunkError::BadLineEnd),
            },
            State::DataCr => match b {
                b'\r' => State::DataLf,
                _ => return Err(ChunkError::BadLineEnd),
            },
            State::DataLf => match b {
                b'\n' => {
                    self.line = 0;
                    State::Size { digits: 0 }
                }
                _ => return Err(ChunkError::BadLineEnd),
            },
            // An empty line ends the trailers (and the answer); any other is a trailer field.
            State::TrailerStart => self.line_byte(b, State::EndLf, State::Trailer, MAX_TRAILERS)?,
            State::Trailer => self.line_byte(b, State::TrailerLf, State::Trailer, MAX_TRAILERS)?,
            State::TrailerLf | State::EndLf => match (b, self.state) {
                (b'\n', State::TrailerLf) => State::TrailerStart,
                (b'\n', _) => State::Done,
                _ => return Err(ChunkError::BadLineEnd),
            },
            State::Data(_) | State::Done => unreachable!("handled by feed"),
        };
        Ok(())
    }

    /// A byte of a skipped line (an extension, a trailer): CR goes to `at_cr`, a bare LF is
    /// refused, anything else is counted against `max` and reads on in `inside`.
    fn line_byte(&mut self, b: u8, at_cr: State, inside: State, max: usize) -> Result<State, ChunkError> {
        match b {
            b'\r' => Ok(at_cr),
            b'\n' => Err(ChunkError::BadLineEnd),
            _ => self.count(inside, max),
        }
    }

    /// One more byte of a bounded line: `next`, unless that passes `max`.
    fn count(&mut self, next: State, max: usize) -> Result<State, ChunkError> {
        self.line += 1;
        if self.line > max {
            return Err(ChunkError::TooLong);
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything `input` decodes to, fed in pieces of `step` bytes.
    fn decode(input: &[u8], step: usize) -> Result<(Vec<u8>, bool, usize), ChunkError> {
        let mut c = Chunked::default();
        let mut out = Vec::new();
        let mut used = 0;
        for piece in input.chunks(step.max(1)) {
            used += c.feed(piece, |d| out.extend_from_slice(d))?;
            if c.is_done() {
                break;
            }
        }
        Ok((out, c.is_done(), used))
    }

    #[test]
    fn chunks_decode_to_their_data_whatever_the_reads() {
        let input = b"5\r\nhello\r\n7;name=\"v\"\r\n, world\r\nA \r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\nnext";
        for step in 1..input.len() {
            let (out, done, used) = decode(input, step).unwrap();
            assert_eq!(out, b"hello, world0123456789", "reads of {step} bytes");
            assert!(done);
            assert_eq!(&input[used..], b"next", "what follows the answer is left unread");
        }
    }

    #[test]
    fn an_answer_without_its_last_chunk_is_not_done() {
        let (out, done, _) = decode(b"3\r\nabc\r\n", 2).unwrap();
        assert_eq!(out, b"abc");
        assert!(!done);
    }

    #[test]
    fn malformed_codings_are_refused_by_their_reason() {
        for (input, why) in [
            (&b"\r\n"[..], ChunkError::BadSize),
            (b"+5\r\nhello\r\n", ChunkError::BadSize),
            (b"0x5\r\nhello\r\n", ChunkError::BadSize),
            (b"-1\r\n", ChunkError::BadSize),
            (b"5\nhello\r\n", ChunkError::BadSize),
            (b"5\r\rhello", ChunkError::BadLineEnd),
            (b"5\r\nhelloX\r\n", ChunkError::BadLineEnd),
            (b"5\r\nhello\rX", ChunkError::BadLineEnd),
            (b"5;ext\nhello", ChunkError::BadLineEnd),
            (b"1000000000000000\r\n", ChunkError::SizeTooLarge),
            (b"0\r\nX: 1\n\r\n", ChunkError::BadLineEnd),
            (b"0\r\n\rX", ChunkError::BadLineEnd),
        ] {
            assert_eq!(
                decode(input, 1).err(),
                Some(why),
                "{:?}",
                String::from_utf8_lossy(input)
            );
            assert_eq!(
                decode(input, input.len()).err(),
                Some(why),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn extensions_and_trailers_are_bounded() {
        let mut long = b"5;".to_vec();
        long.extend(std::iter::repeat_n(b'a', MAX_LINE));
        assert_eq!(decode(&long, 64).err(), Some(ChunkError::TooLong));
        let mut trailers = b"0\r\n".to_vec();
        while trailers.len() <= 2 * MAX_TRAILERS {
            trailers.extend_from_slice(b"X: 1234\r\n");
        }
        assert_eq!(decode(&trailers, 64).err(), Some(ChunkError::TooLong));
    }

    #[test]
    fn the_largest_size_is_taken_without_overflow() {
        let mut c = Chunked::default();
        assert_eq!(c.feed(b"fffffffffffffff\r\nab", |_| {}), Ok(19));
        assert_eq!(c.state, State::Data(0xfff_ffff_ffff_fffd));
    }
}
