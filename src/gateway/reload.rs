//! Reload: read and validate the config file, build the whole new state, then swap it in. Any
//! failure is logged with its reason and the running state keeps serving.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::gateway::Gateway;

/// Reload from `path`; what the reload could not apply (it takes a restart), in words.
pub(crate) fn reload(gw: &Arc<Gateway>, path: &Path) -> Result<Vec<String>, String> {
    let result = crate::config::load(path)
        .map_err(|e| e.to_string())
        .and_then(|settings| {
            // Against the settings in force (the start's or the last reload's): a change is named
            // by the reload that brings it; `doctor` names a listener still unbound after that.
            let later = super::restart_needed::needs_restart(&gw.state().settings, &settings);
            gw.reload(settings).map(|()| later).map_err(|e| format!("{e:#}"))
        });
    match &result {
        Ok(later) => {
            tracing::info!(config = %path.display(), "configuration reloaded");
            if !later.is_empty() {
                tracing::warn!(config = %path.display(), "needs a restart: {}; the rest of the file applies now", later.join(", "));
            }
            gw.probe_external_upstreams();
        }
        Err(why) => {
            gw.metrics.reload_failures.inc();
            tracing::error!(config = %path.display(), reason = %why, "reload refused; the previous configuration keeps serving");
        }
    }
    result
}

/// How often the project sets' folders are read (`git worktree add` shows up within this).
pub(crate) const DISCOVER_EVERY: Duration = Duration::from_secs(1);

/// Follow the project sets' folders until shutdown: a new matching folder becomes a project (its
/// server starts on demand), a removed one's server is stopped and its routes answer 404. Each
/// change swaps a whole new state, as a reload does; connections keep the snapshot they hold.
pub(crate) async fn watch_project_sets(gw: Arc<Gateway>) {
    let mut tick = tokio::time::interval(DISCOVER_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Refused folders are logged when they first appear (`serve` logged those found at start).
    let mut refused: Vec<String> = gw.state().settings.discovery_warnings.clone();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = gw.lifecycle.shutdown.cancelled() => return,
        }
        if gw.state().settings.project_sets.is_empty() {
            refused.clear();
            continue;
        }
        gw.lifecycle.box_sets.list_due(&gw.state()).await;
        let g = gw.clone();
        match tokio::task::spawn_blocking(move || g.rediscover()).await {
            Ok(Ok(found)) => {
                for w in found.refused.iter().filter(|w| !refused.contains(w)) {
                    tracing::warn!("{w}");
                }
                refused = found.refused;
                if let Some((added, removed)) = found.changed {
                    tracing::info!(added = ?added, removed = ?removed, "project sets changed: projects updated");
                    gw.audit.record(
                        crate::audit::Record::new("projects_discovered")
                            .field("projects_added", added)
                            .field("projects_removed", removed),
                    );
                }
            }
            Ok(Err(e)) => {
                tracing::error!(reason = %format!("{e:#}"), "project sets changed but the new state could not be built; the previous one keeps serving")
            }
            Err(e) => tracing::error!(reason = %e, "project set watcher failed"),
        }
    }
}
