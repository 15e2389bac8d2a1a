//! The spend meter at scale (issue 43, target 6): a prompt's budget check and a cost event with
//! 10, 1 000, 10 000 and 100 000 known sessions (past its bound the meter forgets the least
//! recently active). `cargo bench --bench meter` prints the table docs/performance.md quotes;
//! under `cargo test` it runs small and checks only that the figures are figures. `ROUNDS` (default
//! 20 000) is the number of checks and of events timed at each size.

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let rounds = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20_000);
    let (sizes, rounds): (&[usize], usize) = if full {
        (&[10, 1_000, 10_000, 100_000], rounds)
    } else {
        (&[10, 100], 100)
    };
    println!("| sessions known | check (ns) | cost event (ns) | sessions held |");
    println!("|---:|---:|---:|---:|");
    for &n in sizes {
        let (check, seen, held) = opencode_gateway::budget::meter_bench(n, rounds);
        println!("| {n} | {check:.0} | {seen:.0} | {held} |");
        assert!(check.is_finite() && seen.is_finite() && check > 0.0 && seen > 0.0);
        assert!(
            held <= 2 * n,
            "the meter holds {held} sessions for {n} roots with a subagent each"
        );
    }
}
