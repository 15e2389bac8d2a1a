//! The library writes OpenMetrics text; Prometheus asks for it by `Accept` and reads it natively.
//! Anything else (curl, `promtool check metrics`, older scrapers) gets the classic text format
//! (`text/plain; version=0.0.4`), where a counter's family is named with its `_total` suffix and
//! there is no `# EOF`.

/// The OpenMetrics text `om` in the classic text format.
pub(crate) fn from_openmetrics(om: &str) -> String {
    let counters: Vec<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len() + 16 * counters.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(&name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Whether the scraper asked for OpenMetrics.
pub(crate) fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_families_take_their_total_suffix_and_eof_goes() {
        let om = "# HELP g_requests Requests.\n# TYPE g_requests counter\ng_requests_total{a=\"b\"} 2\n# HELP g_open Open.\n# TYPE g_open gauge\ng_open 1\n# EOF\n";
        assert_eq!(
            from_openmetrics(om),
            "# HELP g_requests_total Requests.\n# TYPE g_requests_total counter\ng_requests_total{a=\"b\"} 2\n# HELP g_open Open.\n# TYPE g_open gauge\ng_open 1\n"
        );
    }
}
