//! What a bounded command is (`job.rs` runs it here, `box_exec.rs` on a box): the job, what of
//! its output is kept, and how it ended.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

/// Standard error kept, at most.
pub(crate) const MAX_STDERR: usize = 4096;

/// What of the standard output is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Keep {
    /// The first bytes; past them the command is stopped and the output is "cut".
    Head(usize),
    /// The first bytes; the rest is read and dropped.
    First(usize),
    /// The last bytes (an acceptance test's verdict is at its end).
    Tail(usize),
}

/// One command: `program args` in `dir`, with `env` added.
pub(crate) struct Job<'a> {
    pub dir: &'a Path,
    pub program: &'a str,
    pub args: &'a [&'a OsStr],
    pub env: &'a [(&'a str, &'a OsStr)],
    pub keep: Keep,
    pub timeout: Duration,
}

/// How a command ended.
#[derive(Debug)]
pub(crate) struct Ran {
    /// `Ok`: it exited 0; else "exit <code>" or "killed by a signal".
    pub status: Result<(), String>,
    pub out: Vec<u8>,
    /// The output went past what [`Keep`] keeps.
    pub cut: bool,
    /// The start of its standard error.
    pub err: Vec<u8>,
}

impl Ran {
    /// The first line of complaint on standard error.
    pub(crate) fn complaint(&self) -> String {
        let text = String::from_utf8_lossy(&self.err);
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("no message");
        first.trim().to_string()
    }
}

/// Why a command did not run to its end.
#[derive(Debug, PartialEq)]
pub(crate) enum Failed {
    /// It could not be started (no such program, no such user, the box unreachable).
    Cannot(String),
    /// It was still running at the job's time limit, and was killed.
    TimedOut,
}

/// Output as it comes, kept as [`Keep`] says.
pub(crate) struct Kept {
    keep: Keep,
    bytes: Vec<u8>,
    cut: bool,
}

impl Kept {
    pub(crate) fn new(keep: Keep) -> Kept {
        Kept {
            keep,
            bytes: Vec::new(),
            cut: false,
        }
    }

    /// Take `data`; `true` once the command should be stopped (a head is full).
    pub(crate) fn push(&mut self, data: &[u8]) -> bool {
        match self.keep {
            Keep::Head(max) | Keep::First(max) => {
                let room = max.saturating_sub(self.bytes.len());
                self.bytes.extend_from_slice(&data[..room.min(data.len())]);
                if data.len() > room {
                    self.cut = true;
                }
                self.cut && matches!(self.keep, Keep::Head(_))
            }
            Keep::Tail(max) => {
                self.bytes.extend_from_slice(data);
                if self.bytes.len() > 2 * max {
                    self.bytes.drain(..self.bytes.len() - max);
                    self.cut = true;
                }
                false
            }
        }
    }

    /// The bytes kept, and whether any were left out.
    pub(crate) fn finish(mut self) -> (Vec<u8>, bool) {
        if let Keep::Tail(max) = self.keep
            && self.bytes.len() > max
        {
            self.bytes.drain(..self.bytes.len() - max);
            self.cut = true;
        }
        (self.bytes, self.cut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_keeps_reading_and_tail_says_when_it_dropped_some() {
        let mut k = Kept::new(Keep::First(4));
        assert!(!k.push(b"abcdef"), "First never asks to stop");
        assert_eq!(k.finish(), (b"abcd".to_vec(), true));
        let mut k = Kept::new(Keep::Tail(4));
        assert!(!k.push(b"ab"));
        assert_eq!(k.finish(), (b"ab".to_vec(), false));
    }
}
