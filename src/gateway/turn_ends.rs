//! The inbox's turn ends (`inbox/turns.rs`), heard once for the gateway's life and handed to what
//! acts on them: triggers' runs (`trigger_runs.rs`) and acceptance tests (`accept.rs`).

use std::sync::Arc;

use super::Gateway;

pub(crate) fn listen(gw: &Arc<Gateway>) {
    let Some(mut ends) = gw.inbox.turn_ends() else {
        return;
    };
    let gw = gw.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                end = ends.recv() => match end {
                    Some(end) => {
                        super::accept::turn_ended(&gw, &end);
                        super::trigger_runs::turn_ended(&gw, end).await;
                    }
                    None => return,
                },
                _ = gw.lifecycle.shutdown.cancelled() => return,
            }
        }
    });
}
