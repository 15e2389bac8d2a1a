//! Reload: read and validate the config file, build the whole new state, then swap it in. Any
//! failure is logged with its reason and the running state keeps serving.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::gateway::Gateway;

pub fn reload(gw: &Arc<Gateway>, path: &Path) -> Result<(), String> {
    let result = crate::config::load(path)
        .map_err(|e| e.to_string())
        .and_then(|settings| gw.reload(settings).map_err(|e| format!("{e:#}")));
    match &result {
        Ok(()) => {
            tracing::info!(config = %path.display(), "configuration reloaded");
            gw.probe_external_upstreams();
        }
        Err(why) => {
            gw.metrics.reload_failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(config = %path.display(), reason = %why, "reload refused; the previous configuration keeps serving");
        }
    }
    result
}
