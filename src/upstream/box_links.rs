//! The gateway's SSH links to its boxes, kept across reloads: a box whose `[[box]]` table did not
//! change keeps its link (its one connection, and the spawned servers running in channels on
//! it); a changed or new box gets a new link, made when first needed; a removed box's link goes
//! when the last state and server holding it do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::Settings;
use crate::config::settings::BoxConfig;
use crate::upstream::ssh_link::{BoxLink, BoxSpec};

#[derive(Default)]
pub struct BoxLinks {
    links: Mutex<HashMap<String, (BoxConfig, Arc<BoxLink>)>>,
}

impl BoxLinks {
    /// One link per `[[box]]` of `settings`, the unchanged ones as they were.
    pub(crate) fn reconcile(&self, settings: &Settings) -> anyhow::Result<HashMap<String, Arc<BoxLink>>> {
        let mut kept = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = HashMap::new();
        for b in &settings.boxes {
            let link = match kept.get(&b.name) {
                Some((config, link)) if config == b => link.clone(),
                _ => Arc::new(BoxLink::new(spec(b)?, settings.limits.upstream_connect_timeout)),
            };
            next.insert(b.name.clone(), (b.clone(), link));
        }
        let links = next.iter().map(|(n, (_, l))| (n.clone(), l.clone())).collect();
        *kept = next;
        Ok(links)
    }
}

fn spec(b: &BoxConfig) -> anyhow::Result<BoxSpec> {
    let key = russh::keys::load_secret_key(&b.key, None)
        .map_err(|e| anyhow::anyhow!("box {}: cannot read its key {}: {e}", b.name, b.key.display()))?;
    let keys = |lines: &[String]| {
        lines
            .iter()
            .map(|line| crate::config::validate::known_hosts::parse_host_key(line))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("box {}: host key: {e}", b.name))
    };
    let (host_keys, revoked) = (keys(&b.host_keys)?, keys(&b.revoked_host_keys)?);
    Ok(BoxSpec {
        name: b.name.clone(),
        address: b.address.clone(),
        user: b.user.clone(),
        key: Arc::new(key),
        host_keys,
        revoked,
    })
}
