//! Reading passwords: from a prompt on a terminal (asked twice), else one line from stdin.

use std::io::{BufRead, IsTerminal};

use anyhow::bail;

pub(crate) fn read_new_password() -> anyhow::Result<String> {
    let pw = if std::io::stdin().is_terminal() {
        let a = rpassword::prompt_password("Password: ")?;
        let b = rpassword::prompt_password("Again: ")?;
        if a != b {
            bail!("the two passwords differ");
        }
        a
    } else {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_string()
    };
    if pw.chars().count() < 8 {
        bail!("the password is shorter than 8 characters");
    }
    Ok(pw)
}

/// A random password of 24 letters and digits (about 142 bits).
pub(crate) fn random_password() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut out = String::with_capacity(24);
    while out.len() < 24 {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).expect("the OS random source is available");
        for x in b {
            // Rejection sampling keeps every character equally likely.
            if (x as usize) < 256 - 256 % ALPHABET.len() && out.len() < 24 {
                out.push(ALPHABET[x as usize % ALPHABET.len()] as char);
            }
        }
    }
    out
}
