//! Which model a project's server will answer with, asked of the server itself once it is ready
//! (`GET /config`: the `model` its configuration sets; `GET /config/providers`: the providers it
//! can use, those with credentials or needing none). Reading the configuration files instead
//! would guess: OpenCode merges the user's global file, the project's, `OPENCODE_CONFIG_CONTENT`
//! and its own defaults, and only the server knows what `opencode auth login` left it.

use std::time::Duration;

use crate::upstream::endpoint::Endpoint;

/// OpenCode's own provider (its free models): listed as usable without any key, but it needs the
/// internet, and it is what a server falls back to when nothing of the user's is set up.
const BUILT_IN: &str = "opencode";

/// How to mend a model that will likely fail, for the log, `status` and `doctor`.
pub(crate) const FIX: &str = "set it up as the user the server runs as (`opencode auth login`, or a provider in ~/.config/opencode/opencode.json), or give the project its model in env (OPENCODE_CONFIG_CONTENT)";

/// What a ready server said of its model, kept for `status` (and so `doctor`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    /// [`ModelReport::summary`].
    pub summary: String,
    /// [`ModelReport::problem`].
    pub problem: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ModelReport {
    /// `provider/model` as the configuration sets it.
    pub model: Option<String>,
    /// The providers the server can use.
    pub usable: Vec<String>,
}

impl ModelReport {
    pub(crate) async fn read(endpoint: &Endpoint, connect_timeout: Duration) -> Result<ModelReport, String> {
        let config = endpoint.read_whole("/config", connect_timeout).await?;
        let providers = endpoint.read_whole("/config/providers", connect_timeout).await?;
        Self::parse(&config, &providers)
    }

    pub(crate) fn parse(config: &[u8], providers: &[u8]) -> Result<ModelReport, String> {
        let config: serde_json::Value =
            serde_json::from_slice(config).map_err(|e| format!("GET /config is not JSON: {e}"))?;
        let providers: serde_json::Value =
            serde_json::from_slice(providers).map_err(|e| format!("GET /config/providers is not JSON: {e}"))?;
        let usable = providers["providers"]
            .as_array()
            .ok_or("GET /config/providers has no providers list")?
            .iter()
            .filter_map(|p| p["id"].as_str().map(String::from))
            .collect();
        Ok(ModelReport {
            model: config["model"].as_str().map(String::from),
            usable,
        })
    }

    /// In words, for the log and `status`: the model, or what OpenCode will choose from.
    pub(crate) fn summary(&self) -> String {
        match &self.model {
            Some(m) => m.clone(),
            None => format!("none set (OpenCode picks one of: {})", self.usable.join(", ")),
        }
    }

    /// Why a prompt will likely fail at the model, when it will: the set model's provider has no
    /// credentials here, or nothing but OpenCode's own provider is set up.
    pub(crate) fn problem(&self) -> Option<String> {
        let own: Vec<&String> = self.usable.iter().filter(|p| *p != BUILT_IN).collect();
        match &self.model {
            Some(m) => {
                let provider = m.split_once('/').map_or(m.as_str(), |(p, _)| p);
                (!self.usable.iter().any(|p| p == provider)).then(|| {
                    format!("its model {m} needs provider {provider}, which has no credentials this server can use")
                })
            }
            None if own.is_empty() => Some(
                "no model is set and no provider of the user's is set up: OpenCode falls back to its own free models, which need the internet".into(),
            ),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ModelReport;

    fn report(config: &str, providers: &str) -> ModelReport {
        ModelReport::parse(config.as_bytes(), providers.as_bytes()).unwrap()
    }

    /// Shapes as OpenCode 1.18.33 answers them (a provider only in the user's global config).
    #[test]
    fn the_set_model_and_what_can_serve_it() {
        let usable = r#"{"providers":[{"id":"opencode"},{"id":"fake"}],"default":{"fake":"fake-model"}}"#;
        let set = report(r#"{"model":"fake/fake-model","provider":{}}"#, usable);
        assert_eq!(set.summary(), "fake/fake-model");
        assert_eq!(set.problem(), None);
        let unset = report("{}", usable);
        assert_eq!(unset.summary(), "none set (OpenCode picks one of: opencode, fake)");
        assert_eq!(unset.problem(), None);
        let keyless = report(r#"{"model":"anthropic/claude-sonnet-4-6"}"#, usable);
        assert!(
            keyless.problem().unwrap().contains("needs provider anthropic"),
            "{keyless:?}"
        );
        let bare = report("{}", r#"{"providers":[{"id":"opencode"}]}"#);
        assert!(bare.problem().unwrap().contains("falls back to its own free models"));
        assert!(ModelReport::parse(b"{}", b"{}").is_err());
        assert!(ModelReport::parse(b"<html>", b"{}").is_err());
    }
}
